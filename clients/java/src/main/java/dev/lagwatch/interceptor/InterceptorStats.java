package dev.lagwatch.interceptor;

import java.util.concurrent.atomic.AtomicLong;

final class InterceptorStats implements InterceptorStatsMBean {
    final AtomicLong errors = new AtomicLong();
    final AtomicLong sent = new AtomicLong();

    @Override
    public long getErrors() {
        return errors.get();
    }

    @Override
    public long getReportsSent() {
        return sent.get();
    }
}
