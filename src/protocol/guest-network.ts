// What every guest sees of its network (docs/guest-boot.md): the same address, gateway and
// MACs in every sandbox, so snapshots and forks resume without re-addressing. The network
// slots build the host side to match; the VMM gives the guest's NIC its MAC.

export const GUEST_ADDRESS = "169.254.0.21";
export const GUEST_MAC = "02:fc:00:00:00:15";
/** The gateway is the tap's own address. */
export const GATEWAY_ADDRESS = "169.254.0.22";
export const GUEST_LINK_PREFIX = 30;
/** The gateway's (tap's) MAC is fixed too: a restored guest's ARP cache still points at it. */
export const GATEWAY_MAC = "02:fc:00:00:00:16";
/**
 * Where a guest mounts its sandbox's volumes: NFSv3 and MOUNT v3 on this port of the gateway,
 * served by the host inside the slot's namespace (src/volumes/README.md).
 */
export const VOLUME_NFS_PORT = 2049;
