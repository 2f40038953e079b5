import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

// deploy/kubernetes/: every overlay (and the base) renders with `kubectl kustomize`, every
// object it renders is valid against the Kubernetes API's schemas (kubernetes-models: the
// OpenAPI schemas compiled to ajv validators, checked offline), and the properties that
// matter hold. Needs kubectl (Debian's kubernetes-client), which the e2e tier installs.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const kustomizeDir = join(root, "deploy", "kubernetes");

type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped JSON
  [k: string]: any;
};

function render(dir: string): K8sObject[] {
  const result = spawnSync("kubectl", ["kustomize", join(kustomizeDir, dir)], {
    encoding: "utf8",
    maxBuffer: 16 * 1024 * 1024,
  });
  assert.ok(!result.error, `kubectl: ${result.error?.message} (install kubernetes-client)`);
  assert.equal(result.status, 0, `kubectl kustomize ${dir}:\n${result.stderr}`);
  return parseAllDocuments(result.stdout)
    .map((doc) => doc.toJS() as K8sObject)
    .filter(Boolean)
    .map(unwrapSecretData);
}

/**
 * Newer kustomize wraps long base64 values of a Secret over several lines; the API server's
 * base64 decoder skips the line breaks, the schema's "byte" format does not.
 */
function unwrapSecretData(object: K8sObject): K8sObject {
  if (object.kind !== "Secret" || !object.data) return object;
  const data = Object.entries(object.data as Record<string, string>);
  return { ...object, data: Object.fromEntries(data.map(([k, v]) => [k, v.replace(/\s/g, "")])) };
}

/** Throws (naming the path) unless `object` is valid for its apiVersion and kind. */
async function validate(object: K8sObject): Promise<void> {
  const [group, version] = object.apiVersion.includes("/")
    ? object.apiVersion.split("/")
    : [undefined, object.apiVersion];
  const path = ["kubernetes-models", group, version, object.kind].filter(Boolean).join("/");
  let Model: new (data: unknown) => { validate(): void };
  try {
    Model = (await import(path))[object.kind];
  } catch {
    throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
  }
  new Model(object).validate();
}

const OVERLAYS = ["base", "overlays/dev", "overlays/production"];
const rendered = new Map(OVERLAYS.map((dir) => [dir, render(dir)]));

function find(objects: K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.find((o) => o.kind === kind && o.metadata.name === name);
  assert.ok(found, `${kind}/${name} rendered`);
  return found;
}

const podSpec = (o: K8sObject) => o.spec.template.spec;
// biome-ignore lint/suspicious/noExplicitAny: see K8sObject
const containers = (o: K8sObject): any[] => podSpec(o).containers;

describe("kubernetes manifests", () => {
  for (const dir of OVERLAYS) {
    it(`${dir}: every rendered object is valid against the Kubernetes schemas`, async () => {
      const objects = rendered.get(dir) ?? [];
      assert.ok(objects.length >= 6, `${dir} rendered ${objects.length} objects`);
      for (const object of objects) {
        await assert.doesNotReject(validate(object), `${object.kind}/${object.metadata.name}`);
        if (object.kind !== "Namespace") assert.equal(object.metadata.namespace, "warren");
      }
    });
  }

  it("the schema check fails on invalid objects", async () => {
    const objects = rendered.get("overlays/production") ?? [];
    const gateway = structuredClone(find(objects, "Deployment", "warren-gateway"));
    gateway.spec.replicas = "3";
    await assert.rejects(validate(gateway), /replicas must be integer/);
    const node = structuredClone(find(objects, "DaemonSet", "warren-node"));
    containers(node)[0].ports[0].containerPort = "3000";
    await assert.rejects(validate(node), /containerPort must be integer/);
    delete containers(node)[0].ports[0].containerPort;
    await assert.rejects(validate(node), /containerPort/);
    await assert.rejects(validate({ ...node, kind: "DaemonSett" }), /no schema/);
  });

  for (const dir of OVERLAYS) {
    it(`${dir}: the node server is privileged, on the host's network, on Warren's nodes`, () => {
      const node = find(rendered.get(dir) ?? [], "DaemonSet", "warren-node");
      const spec = podSpec(node);
      assert.equal(spec.hostNetwork, true);
      assert.equal(spec.dnsPolicy, "ClusterFirstWithHostNet");
      assert.deepEqual(spec.nodeSelector, { "warren.dev/node": "true" });
      assert.equal(spec.tolerations, undefined, "no tolerations by default");
      assert.ok(spec.terminationGracePeriodSeconds >= 600, "time for a drain");
      for (const c of [...spec.initContainers, ...spec.containers])
        assert.equal(c.securityContext.privileged, true, c.name);
      const hostPaths = Object.fromEntries(
        // biome-ignore lint/suspicious/noExplicitAny: see K8sObject
        spec.volumes.filter((v: any) => v.hostPath).map((v: any) => [v.hostPath.path, v]),
      );
      for (const path of ["/var/lib/warren", "/dev/kvm", "/dev/net/tun"])
        assert.ok(hostPaths[path], `hostPath ${path}`);
      assert.equal(hostPaths["/dev/kvm"].hostPath.type, "CharDevice");
    });

    it(`${dir}: nodes and gateways have their cluster certificates; gateways reach nodes over https`, () => {
      const objects = rendered.get(dir) ?? [];
      const mountAt = (o: K8sObject, path: string) => {
        const mount = containers(o)[0].volumeMounts.find(
          (m: { mountPath: string }) => m.mountPath === path,
        );
        assert.ok(mount, `${o.metadata.name} mounts ${path}`);
        assert.equal(mount.readOnly, true);
        // biome-ignore lint/suspicious/noExplicitAny: see K8sObject
        return podSpec(o).volumes.find((v: any) => v.name === mount.name);
      };
      const node = find(objects, "DaemonSet", "warren-node");
      // Each host's own directory: no node holds another's key.
      assert.deepEqual(mountAt(node, "/etc/warren/cluster").hostPath, {
        path: "/etc/warren/cluster",
        type: "Directory",
      });
      const env = Object.fromEntries(
        containers(node)[0].env.map((e: { name: string; value?: string }) => [e.name, e.value]),
      );
      assert.match(env.WARREN_NODE_URL, /^https:\/\/\$\(NODE_IP\):3443$/);
      const ports = containers(node)[0].ports.map((p: { hostPort: number }) => p.hostPort);
      assert.ok(ports.includes(3443), "the cluster port on the host");
      const gateway = find(objects, "Deployment", "warren-gateway");
      const secret = mountAt(gateway, "/etc/warren/cluster").secret;
      assert.equal(secret.secretName, "warren-cluster-gateway");
      assert.equal(secret.defaultMode, 0o440);
      assert.equal(podSpec(gateway).securityContext.fsGroup, 65532);
    });

    it(`${dir}: the gateway runs as non-root with a read-only root and no privilege`, () => {
      const gateway = find(rendered.get(dir) ?? [], "Deployment", "warren-gateway");
      const spec = podSpec(gateway);
      assert.equal(spec.securityContext.runAsNonRoot, true);
      assert.ok(spec.securityContext.runAsUser > 0);
      assert.equal(spec.hostNetwork, undefined);
      for (const c of containers(gateway)) {
        assert.equal(c.securityContext.readOnlyRootFilesystem, true);
        assert.equal(c.securityContext.allowPrivilegeEscalation, false);
        assert.equal(c.securityContext.privileged, false);
        assert.deepEqual(c.securityContext.capabilities.drop, ["ALL"]);
        assert.equal(c.readinessProbe.httpGet.path, "/health");
      }
    });

    it(`${dir}: every container has probes and resource requests`, () => {
      for (const o of (rendered.get(dir) ?? []).filter((o) => o.spec?.template)) {
        for (const c of containers(o)) {
          const where = `${o.kind}/${o.metadata.name} ${c.name}`;
          assert.ok(c.readinessProbe, `${where}: readinessProbe`);
          assert.ok(c.livenessProbe, `${where}: livenessProbe`);
          assert.ok(
            c.resources?.requests?.cpu && c.resources.requests.memory,
            `${where}: requests`,
          );
        }
        for (const c of podSpec(o).initContainers ?? [])
          assert.ok(c.resources?.requests?.cpu, `${o.metadata.name} init ${c.name}: requests`);
      }
    });

    it(`${dir}: secrets come from a Secret by reference, never inline`, () => {
      const objects = rendered.get(dir) ?? [];
      const secrets = objects.filter((o) => o.kind === "Secret");
      if (dir === "overlays/dev") assert.equal(secrets.length, 1, "dev generates one");
      else assert.equal(secrets.length, 0, `${dir} carries no Secret`);
      const SECRET = /DATABASE_URL|API_KEYS|SECRET|PASSWORD|ACCESS_KEY/;
      let refs = 0;
      for (const o of objects.filter((o) => o.spec?.template)) {
        for (const c of [...(podSpec(o).initContainers ?? []), ...containers(o)]) {
          for (const env of c.env ?? []) {
            if (!SECRET.test(env.name)) continue;
            const ref = env.valueFrom?.secretKeyRef;
            assert.ok(ref, `${o.metadata.name} ${c.name}: ${env.name} not from a Secret`);
            assert.equal(env.value, undefined);
            assert.equal(ref.name, "warren-secrets");
            const secret = secrets[0];
            if (secret && !ref.optional)
              assert.ok(ref.key in secret.data, `${ref.key} in the generated Secret`);
            refs += 1;
          }
        }
      }
      assert.ok(refs >= 4, "gateway and node read the database URL and API keys");
      for (const map of objects.filter((o) => o.kind === "ConfigMap"))
        for (const key of Object.keys(map.data)) assert.doesNotMatch(key, SECRET);
    });
  }

  it("overlays: the image is set, the gateway scaled, the shared store chosen", () => {
    const config = (objects: K8sObject[]) =>
      objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("warren-config"))
        ?.data;
    const images = (objects: K8sObject[]) =>
      objects
        .filter((o) => o.metadata.name.startsWith("warren-"))
        .filter((o) => o.spec?.template)
        .flatMap((o) => [...(podSpec(o).initContainers ?? []), ...containers(o)])
        .map((c) => c.image);

    const base = rendered.get("base") ?? [];
    assert.equal(find(base, "Deployment", "warren-gateway").spec.replicas, 2);
    assert.ok(images(base).every((image) => image === "warren"));

    const dev = rendered.get("overlays/dev") ?? [];
    assert.ok(images(dev).every((image) => image === "warren:latest"));
    assert.equal(find(dev, "Deployment", "warren-gateway").spec.replicas, 1);
    const devStore = config(dev)?.WARREN_SHARED_STORE;
    assert.match(devStore, /^\//);
    const node = find(dev, "DaemonSet", "warren-node");
    const mount = containers(node)[0].volumeMounts.find(
      (m: { mountPath: string }) => m.mountPath === devStore,
    );
    assert.ok(mount, "the store path is mounted into the node");
    // biome-ignore lint/suspicious/noExplicitAny: see K8sObject
    const volume = podSpec(node).volumes.find((v: any) => v.name === mount.name);
    assert.ok(volume.hostPath, "from the host");

    const prod = rendered.get("overlays/production") ?? [];
    assert.ok(images(prod).every((image) => image === "warren:latest"));
    assert.equal(find(prod, "Deployment", "warren-gateway").spec.replicas, 3);
    assert.equal(find(prod, "PodDisruptionBudget", "warren-gateway").spec.minAvailable, 2);
    assert.match(config(prod)?.WARREN_SHARED_STORE, /^s3:\/\//);
    assert.ok(config(prod)?.WARREN_S3_REGION);
  });
});
