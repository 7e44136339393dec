package txnbench.client;

import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.common.policies.data.TenantInfo;

/** The admin calls both designs share: the run's tenants and namespaces. */
final class Admin {
    private Admin() {}

    static PulsarAdmin connect(String adminUrl) throws Exception {
        // Short timeouts: an unreachable broker is a fatal setup error, reported in seconds.
        return PulsarAdmin.builder().serviceHttpUrl(adminUrl)
                .connectionTimeout(5, TimeUnit.SECONDS)
                .readTimeout(60, TimeUnit.SECONDS)
                .requestTimeout(60, TimeUnit.SECONDS)
                .build();
    }

    /** Creates every tenant/namespace named (a tenant allowed on every cluster); existing ones are kept. */
    static void ensureNamespaces(PulsarAdmin admin, Set<String> namespaces) throws PulsarAdminException {
        Set<String> tenants = new HashSet<>(admin.tenants().getTenants());
        List<String> clusters = null;
        for (String ns : namespaces) {
            String tenant = ns.substring(0, ns.indexOf('/'));
            if (!tenants.contains(tenant)) {
                if (clusters == null) clusters = admin.clusters().getClusters();
                try {
                    admin.tenants().createTenant(tenant,
                            TenantInfo.builder().allowedClusters(new HashSet<>(clusters)).build());
                } catch (PulsarAdminException.ConflictException e) {
                    // made meanwhile
                }
                tenants.add(tenant);
            }
            try {
                admin.namespaces().createNamespace(ns);
            } catch (PulsarAdminException.ConflictException e) {
                // a namespace the run reuses
            }
        }
    }
}
