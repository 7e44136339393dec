package txnbench.client;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;

/**
 * Whether the broker's two endpoints take a connection, checked before any client is built: the
 * v4 client's build waits out its operation timeout (30 s) retrying the coordinators' lookup on
 * an unreachable broker, so a wrong URL took half a minute to be reported. As the Python side
 * checks before it starts this program (bench/pulsar/target.py).
 */
final class Reach {
    private static final int TIMEOUT_MS = 5_000;

    private Reach() {}

    /** Throws naming the URL when neither of a service URL's hosts, or the admin URL's, accepts. */
    static void check(String serviceUrl, String adminUrl) throws IOException {
        int sep = serviceUrl.indexOf("://");
        if (sep < 0) throw new IllegalArgumentException("service URL " + serviceUrl + " has no scheme");
        int defaultPort = serviceUrl.startsWith("pulsar+ssl") ? 6651 : 6650;
        IOException last = null;
        for (String hostPort : serviceUrl.substring(sep + 3).replaceAll("/.*$", "").split(",")) {
            try {
                connect(URI.create("tcp://" + hostPort.trim()), defaultPort);
                last = null;
                break;
            } catch (IOException e) {
                last = e;
            }
        }
        if (last != null) throw new IOException("broker " + serviceUrl + " is unreachable (" + last.getMessage() + ")");
        URI admin = URI.create(adminUrl);
        try {
            connect(admin, "https".equals(admin.getScheme()) ? 443 : 80);
        } catch (IOException e) {
            throw new IOException("admin " + adminUrl + " is unreachable (" + e.getMessage() + ")");
        }
    }

    private static void connect(URI uri, int defaultPort) throws IOException {
        if (uri.getHost() == null) throw new IOException("no host in " + uri);
        int port = uri.getPort() < 0 ? defaultPort : uri.getPort();
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(uri.getHost(), port), TIMEOUT_MS);
        } catch (IOException e) {
            throw new IOException(uri.getHost() + ":" + port + ": " + e.getMessage(), e);
        }
    }
}
