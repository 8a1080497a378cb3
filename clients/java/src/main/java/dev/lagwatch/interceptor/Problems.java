package dev.lagwatch.interceptor;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Logs each distinct problem (where it happened and the exception's class) at most once per
 * log interval, with how many were left unlogged since, so an unreachable cluster cannot
 * flood the application's log.
 */
final class Problems {
    private static final Logger LOG = LoggerFactory.getLogger("dev.lagwatch.interceptor");
    private static final int MAX_KINDS = 64;
    private static final Map<String, long[]> SEEN = new HashMap<>(); // kind -> {logged at, unlogged since}

    private Problems() {
    }

    static void log(String where, Throwable e, long intervalMs) {
        Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        String kind = where + ": " + cause.getClass().getName();
        long now = System.currentTimeMillis();
        long unlogged;
        synchronized (SEEN) {
            long[] s = SEEN.get(kind);
            if (s == null) {
                if (SEEN.size() >= MAX_KINDS) {
                    SEEN.clear();
                }
                s = new long[] {Long.MIN_VALUE / 2, 0};
                SEEN.put(kind, s);
            }
            if (now - s[0] < intervalMs) {
                s[1]++;
                return;
            }
            unlogged = s[1];
            s[0] = now;
            s[1] = 0;
        }
        LOG.warn("lagwatch interceptor: {} failed: {}: {}{}", where, cause.getClass().getSimpleName(),
                cause.getMessage(), unlogged > 0 ? " (" + unlogged + " more since last logged)" : "");
    }
}
