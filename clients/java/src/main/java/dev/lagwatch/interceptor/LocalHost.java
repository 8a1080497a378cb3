package dev.lagwatch.interceptor;

import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.List;
import org.apache.kafka.common.utils.Utils;

/**
 * The reporter's host as {@code hostname/address}, in the form of Java's
 * {@code InetAddress.toString()}. Brokers describe a member's host as {@code /address} of its
 * connection, so the address is the local one the kernel routes to the cluster by (a
 * connected UDP socket sends nothing); lagwatch matches reports to members on it.
 */
final class LocalHost {
    private LocalHost() {
    }

    static String describe(List<String> bootstrapServers) {
        String address = null;
        for (String server : bootstrapServers) {
            try (DatagramSocket s = new DatagramSocket()) {
                String h = Utils.getHost(server.trim());
                Integer port = Utils.getPort(server.trim());
                if (h == null || port == null) {
                    continue;
                }
                s.connect(new InetSocketAddress(h, port));
                InetAddress local = s.getLocalAddress();
                if (local != null && !local.isAnyLocalAddress()) {
                    address = local.getHostAddress();
                    break;
                }
            } catch (Exception e) {
                // unresolvable or unroutable: try the next server
            }
        }
        String name;
        try {
            InetAddress self = InetAddress.getLocalHost();
            name = self.getHostName();
            if (address == null) {
                address = self.getHostAddress();
            }
        } catch (Exception e) {
            String env = System.getenv("HOSTNAME");
            name = env != null ? env : "unknown";
        }
        return name + "/" + (address == null ? "" : address);
    }
}
