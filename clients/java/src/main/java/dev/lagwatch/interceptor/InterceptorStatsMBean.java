package dev.lagwatch.interceptor;

/** What JMX shows of one interceptor: {@code dev.lagwatch:type=consumer-interceptor,client-id=...}. */
public interface InterceptorStatsMBean {
    /** Failures caught so far: reports not sent, failed hooks. */
    long getErrors();

    /** Reports acknowledged by Kafka. */
    long getReportsSent();
}
