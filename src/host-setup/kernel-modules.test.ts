import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  moduleName,
  parseKernelConfig,
  parseModulesDep,
  parseSoftdeps,
  planModules,
} from "./kernel-modules.js";

// Shaped like Debian's 6.1 cloud kernel after depmod.
const MODULES_DEP = `kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko
kernel/net/core/failover.ko:
kernel/crypto/crc32c_generic.ko:
kernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko kernel/fs/mbcache.ko
kernel/fs/jbd2/jbd2.ko:
kernel/fs/mbcache.ko:
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/nfs/nfsv3.ko: kernel/fs/nfs/nfs.ko kernel/fs/lockd/lockd.ko kernel/net/sunrpc/sunrpc.ko kernel/fs/nfs_common/grace.ko
kernel/fs/nfs/nfs.ko: kernel/fs/lockd/lockd.ko kernel/net/sunrpc/sunrpc.ko kernel/fs/nfs_common/grace.ko
kernel/fs/lockd/lockd.ko: kernel/net/sunrpc/sunrpc.ko kernel/fs/nfs_common/grace.ko
kernel/net/sunrpc/sunrpc.ko:
kernel/fs/nfs_common/grace.ko:
`;

const CONFIG = `# comment
CONFIG_VIRTIO_MMIO=m
CONFIG_VIRTIO_BLK=m
CONFIG_VIRTIO_NET=m
CONFIG_EXT4_FS=y
CONFIG_HW_RANDOM=y
CONFIG_HW_RANDOM_VIRTIO=m
CONFIG_NFS_V3=m
# CONFIG_FOO is not set
`;

describe("kernel module planning", () => {
  it("names modules as lsmod does", () => {
    assert.equal(moduleName("kernel/drivers/net/virtio_net.ko.xz"), "virtio_net");
    assert.equal(moduleName("kernel/drivers/char/hw_random/virtio-rng.ko"), "virtio_rng");
  });

  it("loads every dependency before what needs it, once, and skips built-ins", () => {
    const plan = planModules(parseKernelConfig(CONFIG), parseModulesDep(MODULES_DEP), new Map());
    assert.deepEqual(plan.builtin, ["ext4", "rng_core"]);
    const names = plan.load.map((m) => m.name);
    assert.deepEqual(names, [
      "virtio_ring",
      "virtio",
      "virtio_mmio",
      "virtio_blk",
      "failover",
      "net_failover",
      "virtio_net",
      "virtio_rng",
      "sunrpc",
      "grace",
      "lockd",
      "nfs",
      "nfsv3",
    ]);
    assert.equal(plan.load.at(-7)?.path, "kernel/drivers/net/virtio_net.ko.xz");
  });

  it("loads modular ext4 with its dependencies and pre-softdeps", () => {
    const config = parseKernelConfig(CONFIG.replace("CONFIG_EXT4_FS=y", "CONFIG_EXT4_FS=m"));
    const softdeps = parseSoftdeps("softdep ext4 pre: crc32c_generic crypto-nothing post: foo\n");
    const plan = planModules(config, parseModulesDep(MODULES_DEP), softdeps);
    const names = plan.load.map((m) => m.name);
    assert.deepEqual(names.slice(-10, -6), ["crc32c_generic", "jbd2", "mbcache", "ext4"]);
    assert.deepEqual(plan.builtin, ["rng_core"]);
  });

  it("loads a modular hw_random core before virtio_rng (the guest's entropy device)", () => {
    const config = parseKernelConfig(CONFIG.replace("CONFIG_HW_RANDOM=y", "CONFIG_HW_RANDOM=m"));
    const modulesDep = parseModulesDep(
      MODULES_DEP.replace(
        "virtio-rng.ko: ",
        "virtio-rng.ko: kernel/drivers/char/hw_random/rng-core.ko ",
      ).concat("kernel/drivers/char/hw_random/rng-core.ko:\n"),
    );
    const names = planModules(config, modulesDep, new Map()).load.map((m) => m.name);
    assert.deepEqual(names.slice(-7, -5), ["rng_core", "virtio_rng"]);
  });

  it("fails naming the config symbol when the kernel lacks a driver", () => {
    const config = parseKernelConfig(CONFIG.replace("CONFIG_VIRTIO_NET=m", ""));
    assert.throws(
      () => planModules(config, parseModulesDep(MODULES_DEP), new Map()),
      /virtio_net: CONFIG_VIRTIO_NET is not set/,
    );
  });
});
