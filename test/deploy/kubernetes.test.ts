// config/kubernetes/, checked without a cluster: the ConfigMap's proxy.yaml loads through the
// proxy's own loader with the container's environment, and the Deployment agrees with it (ports,
// probes, grace period); the probes' paths answer 200 on a proxy serving that very config.
import fs from 'node:fs';
import path from 'node:path';
import { parseConfigText } from '../../src/compiler/load';
import type { ProxyConfig } from '../../src/config/types';
import { send } from '../support/http';
import { startProxy } from '../support/proxy';
import { testUnless } from '../support/run-report';
import { readDockerfile, stageNamed, lastOf } from './docker-build-inputs';
import {
  checkSchemas,
  disruptionsAllowed,
  documentsOf,
  KUBECTL,
  KUBERNETES_DIR,
  kustomizationOf,
  type Manifest,
  render,
  type SchemaVerdict,
  resourcesOf,
  unknownFields,
} from './kubernetes-manifests';

interface Probe {
  readonly httpGet?: { readonly path: string; readonly port: number | string };
}

interface Container {
  readonly name: string;
  readonly image: string;
  readonly args?: string[];
  readonly ports?: { readonly name?: string; readonly containerPort: number }[];
  readonly env?: {
    readonly name: string;
    readonly value?: string;
    readonly valueFrom?: {
      readonly secretKeyRef?: { readonly name: string; readonly key: string };
    };
  }[];
  readonly readinessProbe?: Probe;
  readonly livenessProbe?: Probe;
  readonly startupProbe?: Probe;
  readonly lifecycle?: { readonly preStop?: { readonly exec?: { readonly command: string[] } } };
  readonly securityContext?: {
    readonly readOnlyRootFilesystem?: boolean;
    readonly allowPrivilegeEscalation?: boolean;
    readonly capabilities?: { readonly drop?: string[] };
  };
  readonly volumeMounts?: { readonly name: string; readonly mountPath: string }[];
}

interface PodSpec {
  readonly terminationGracePeriodSeconds?: number;
  readonly topologySpreadConstraints?: {
    readonly topologyKey: string;
    readonly labelSelector?: { readonly matchLabels?: Record<string, string> };
  }[];
  readonly securityContext?: {
    readonly runAsNonRoot?: boolean;
    readonly runAsUser?: number;
  };
  readonly containers: Container[];
  readonly volumes?: {
    readonly name: string;
    readonly configMap?: { readonly name: string };
    readonly emptyDir?: Record<string, unknown>;
  }[];
}

/** The default set: what kustomization.yaml lists. */
const manifests = resourcesOf();

function only(kind: string, among: readonly Manifest[] = manifests): Manifest {
  const found = among.filter((manifest) => manifest.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, found ${found.length}`);
  return found[0]!;
}

const deployment = only('Deployment');
const service = only('Service');
const pdb = only('PodDisruptionBudget');
const configMap = only('ConfigMap');
const networkPolicy = only('NetworkPolicy');
const template = deployment.spec!.template as {
  metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
  spec: PodSpec;
};
const pod = template.spec;
const container = pod.containers[0]!;

/** The examples beside the default set, each documented in the README. */
const EXAMPLES = ['hpa.yaml', 'servicemonitor.yaml'];
const hpa = only('HorizontalPodAutoscaler', documentsOf('hpa.yaml'));
const COMPONENT = 'migration-job';
const migrationJob = only('Job', resourcesOf(COMPONENT));

/** Where the container reads its config: the --config argument, in the ConfigMap's mount. */
function configFile(): { mount: string; key: string } {
  const args = container.args ?? [];
  const file = args[args.indexOf('--config') + 1] ?? '';
  return { mount: path.posix.dirname(file), key: path.posix.basename(file) };
}

/** A container's environment: literal values, and a stand-in for each one from a Secret. */
function containerEnv(of: Container = container): NodeJS.ProcessEnv {
  const standIn: Record<string, string> = {
    DATABASE_URL: 'postgres://proxy:secret@postgres:5432/idempotency',
    ADMIN_TOKEN: 'a-token-from-the-secret',
  };
  return Object.fromEntries(
    (of.env ?? []).map((entry) => [entry.name, entry.value ?? standIn[entry.name] ?? 'x']),
  );
}

const configText = () => configMap.data?.[configFile().key] ?? '';
const configFor = (of: Container): ProxyConfig =>
  parseConfigText(configText(), 'configmap proxy.yaml', containerEnv(of));
const config: ProxyConfig = configFor(container);

/** A probe's or Service's port, named or numbered, as the container's port number. */
function portNumber(port: number | string | undefined): number | undefined {
  if (typeof port === 'number') return port;
  return container.ports?.find((each) => each.name === port)?.containerPort;
}

/** True when every label the selector asks for is on `labels`. */
function selects(selector: Record<string, string> | undefined, labels: Record<string, string>) {
  return Object.entries(selector ?? {}).every(([key, value]) => labels[key] === value);
}

const matchLabels = (manifest: Manifest): Record<string, string> =>
  (manifest.spec!.selector as { matchLabels: Record<string, string> }).matchLabels;

const WILDCARD_HOSTS = ['0.0.0.0', '::'];

describe('config/kubernetes/kustomization.yaml ties the default set together', () => {
  it('lists files that exist; every other manifest is a documented example or the component', () => {
    const listed = kustomizationOf().resources ?? [];
    for (const file of listed) expect(fs.existsSync(path.join(KUBERNETES_DIR, file))).toBe(true);
    const yamlFiles = fs
      .readdirSync(KUBERNETES_DIR)
      .filter((file) => file.endsWith('.yaml') && file !== 'kustomization.yaml');
    expect(yamlFiles.filter((file) => !listed.includes(file)).sort()).toEqual(EXAMPLES);
    const readme = fs.readFileSync(path.join(KUBERNETES_DIR, 'README.md'), 'utf8');
    for (const file of [...listed, ...EXAMPLES, `${COMPONENT}/`]) expect(readme).toContain(file);
  });

  it('holds the migration Job as a component whose files exist, switched off until its line is uncommented', () => {
    const component = kustomizationOf(COMPONENT);
    expect(component.kind).toBe('Component');
    for (const file of [
      ...(component.resources ?? []),
      ...(component.patches ?? []).map((p) => p.path),
    ])
      expect(fs.existsSync(path.join(KUBERNETES_DIR, COMPONENT, file))).toBe(true);
    expect(kustomizationOf().components).toBeUndefined();
    const text = fs.readFileSync(path.join(KUBERNETES_DIR, 'kustomization.yaml'), 'utf8');
    expect(text).toMatch(new RegExp(`^# components:\\n#   - ${COMPONENT}$`, 'm'));
  });

  testUnless(!KUBECTL && 'kubectl is not installed', 'kustomize rendering')(
    'renders with `kubectl kustomize` to exactly the listed files',
    () => {
      expect(render({ components: false })).toEqual(
        expect.arrayContaining(manifests.map((manifest) => expect.objectContaining(manifest))),
      );
      expect(render({ components: false })).toHaveLength(manifests.length);
    },
  );

  testUnless(!KUBECTL && 'kubectl is not installed', 'kustomize rendering')(
    'with the component on: the Job migrates as the migrating role, the pods serve without migrating',
    () => {
      const rendered = render({ components: true });
      const job = only('Job', rendered);
      const jobContainer = (job.spec!.template as { spec: PodSpec }).spec.containers[0]!;
      const servingPod = (only('Deployment', rendered).spec!.template as { spec: PodSpec }).spec;
      const serving = servingPod.containers[0]!;
      // Same image and config; `migrate` as the role that may create tables.
      expect(jobContainer.image).toBe(serving.image);
      expect(jobContainer.args).toEqual(['migrate', ...(serving.args ?? []).slice(1)]);
      const secretKey = (of: Container) =>
        of.env?.find((entry) => entry.name === 'DATABASE_URL')?.valueFrom?.secretKeyRef?.key;
      expect([secretKey(jobContainer), secretKey(serving)]).toEqual([
        'migrate-database-url',
        'database-url',
      ]);
      // The ConfigMap's store.migrate follows: true in the default set, false with the component.
      expect([config.store.migrate, configFor(serving).store.migrate]).toEqual([true, false]);
      expect(configFor(jobContainer).store.migrate).toBe(true);
      expect(rendered.filter((m) => m.kind === 'NetworkPolicy')).toHaveLength(2);
    },
  );
});

describe('every manifest validates against the Kubernetes API schemas', () => {
  const everyFile = [
    ...(kustomizationOf().resources ?? []),
    ...EXAMPLES,
    ...(kustomizationOf(COMPONENT).resources ?? []).map((file) => `${COMPONENT}/${file}`),
  ];

  // One child process for every file's documents (each start loads the models anew).
  let verdicts: Map<Manifest, SchemaVerdict> | undefined;
  const verdictOf = (manifest: Manifest): SchemaVerdict => {
    if (!verdicts) {
      const all = [...documentsByFile.values()].flat();
      const found = checkSchemas(all);
      verdicts = new Map(all.map((each, i) => [each, found[i]!]));
    }
    return verdicts.get(manifest)!;
  };
  const documentsByFile = new Map(everyFile.map((file) => [file, documentsOf(file)]));

  it.each(everyFile)('%s', (file) => {
    const documents = documentsByFile.get(file)!;
    documents.forEach((manifest) => {
      const verdict = verdictOf(manifest);
      // A custom resource has no schema in kubernetes-models; its fields are checked below.
      if (manifest.kind === 'ServiceMonitor') expect(verdict).toEqual({ schema: false });
      else expect({ kind: manifest.kind, ...verdict }).toEqual({ kind: manifest.kind, errors: [] });
    });
  });

  testUnless(!KUBECTL && 'kubectl is not installed', 'kustomize rendering')(
    'as rendered, with and without the component (its patch included)',
    () => {
      const rendered = [...render({ components: false }), ...render({ components: true })];
      expect(checkSchemas(rendered)).toEqual(rendered.map(() => ({ errors: [] })));
    },
  );

  it('names no field the API does not know, in any file (and the check finds one that it does not)', () => {
    const documents = [...documentsByFile.values()].flat();
    const misspelt = structuredClone(deployment) as Manifest & { spec: { template: unknown } };
    const podSpec = (misspelt.spec.template as { spec: Record<string, unknown> }).spec;
    podSpec.topologySpreadConstraint = podSpec.topologySpreadConstraints;
    delete podSpec.topologySpreadConstraints;
    expect(unknownFields([...documents, misspelt])).toEqual([
      ...documents.map(() => []),
      [
        "Object literal may only specify known properties, and '\"topologySpreadConstraint\"' does not exist in type 'IPodSpec'.",
      ],
    ]);
  });

  it('and the check fails a broken one (a port as text, no containers)', () => {
    const broken = structuredClone(deployment) as Manifest & { spec: { template: unknown } };
    const podSpec = (broken.spec.template as { spec: { containers: unknown[] } }).spec;
    podSpec.containers = [{ name: 'proxy', ports: [{ containerPort: 'eighty' }] }];
    const noContainers = structuredClone(migrationJob) as Manifest & {
      spec: { template: unknown };
    };
    delete (noContainers.spec.template as { spec: { containers?: unknown } }).spec.containers;
    expect(checkSchemas([broken, noContainers])).toEqual([
      { errors: ['/spec/template/spec/containers/0/ports/0/containerPort must be integer'] },
      { errors: ['/spec/template/spec must have required property containers'] },
    ]);
  });
});

describe('config/kubernetes agrees with the proxy config it carries', () => {
  it('mounts the ConfigMap where the container reads --config, and the file is a valid config', () => {
    const { mount } = configFile();
    const volume = pod.volumes?.find((each) => each.configMap?.name === configMap.metadata.name);
    expect(volume).toBeDefined();
    expect(container.volumeMounts).toContainEqual({
      name: volume?.name,
      mountPath: mount,
      readOnly: true,
    });
    expect(config.routes.length).toBeGreaterThan(0);
    expect(config.store.url).toBe(containerEnv().DATABASE_URL);
  });

  it('takes DATABASE_URL from a Secret: the image has no embedded PostgreSQL', () => {
    const databaseUrl = container.env?.find((entry) => entry.name === 'DATABASE_URL');
    expect(databaseUrl?.valueFrom?.secretKeyRef?.name).toBeDefined();
  });

  it("exposes listen.port as the container's http port, on every interface (PROXY_HOST), and the Service sends there", () => {
    expect(containerEnv().PROXY_HOST).toBe('0.0.0.0');
    expect(WILDCARD_HOSTS).toContain(config.listen.host);
    expect(portNumber('http')).toBe(config.listen.port);
    const ports = (service.spec!.ports as { targetPort: number | string }[]).map((port) =>
      portNumber(port.targetPort),
    );
    expect(ports).toEqual([config.listen.port]);
  });

  it("probes readiness on the admin listener's /readyz and liveness on its /healthz", () => {
    expect(WILDCARD_HOSTS).toContain(config.admin.host);
    expect(portNumber('admin')).toBe(config.admin.port);
    const probes = {
      readiness: container.readinessProbe?.httpGet,
      liveness: container.livenessProbe?.httpGet,
      startup: container.startupProbe?.httpGet,
    };
    expect(probes.readiness?.path).toBe('/readyz');
    expect(probes.liveness?.path).toBe('/healthz');
    for (const probe of Object.values(probes)) {
      expect(probe).toBeDefined();
      expect(portNumber(probe?.port)).toBe(config.admin.port);
    }
  });

  it("asks Prometheus (by annotation) to scrape the admin port's /metrics", () => {
    const annotations = template.metadata.annotations ?? {};
    expect(annotations['prometheus.io/scrape']).toBe('true');
    expect(Number(annotations['prometheus.io/port'])).toBe(config.admin.port);
    expect(annotations['prometheus.io/path']).toBe('/metrics');
  });

  it("the ServiceMonitor example scrapes the admin port's /metrics through a Service of its own", () => {
    const [adminService, monitor] = documentsOf('servicemonitor.yaml') as [Manifest, Manifest];
    expect([adminService.kind, monitor.kind]).toEqual(['Service', 'ServiceMonitor']);
    expect(
      selects(adminService.spec!.selector as Record<string, string>, template.metadata.labels),
    ).toBe(true);
    const ports = adminService.spec!.ports as { name: string; targetPort: string }[];
    expect(ports.map((port) => portNumber(port.targetPort))).toEqual([config.admin.port]);
    const spec = monitor.spec as {
      selector: { matchLabels: Record<string, string> };
      endpoints: { port: string; path: string }[];
    };
    // It picks the admin Service only, never the client one (whose port is not the admin port).
    expect(selects(spec.selector.matchLabels, adminService.metadata.labels ?? {})).toBe(true);
    expect(selects(spec.selector.matchLabels, service.metadata.labels ?? {})).toBe(false);
    expect(spec.endpoints).toEqual([
      expect.objectContaining({ port: ports[0]!.name, path: '/metrics' }),
    ]);
  });

  it('gives a pod longer to stop than its preStop pause plus the drains (shutdownGrace, store.outbox.drainTimeout)', () => {
    const command = container.lifecycle?.preStop?.exec?.command ?? [];
    const pauseMs = command[0] === 'sleep' ? Number(command[1]) * 1000 : 0;
    expect(Number.isFinite(pauseMs)).toBe(true);
    const graceMs = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
    expect(config.store.outbox.drainTimeoutMs).toBe(30_000);
    expect(graceMs).toBeGreaterThan(
      pauseMs + config.shutdownGraceMs + config.store.outbox.drainTimeoutMs,
    );
  });

  it("runs as the image's non-root user on a read-only root filesystem, with only /tmp and the spool writable", () => {
    const image = stageNamed(readDockerfile(), 'proxy');
    expect(lastOf(readDockerfile(), image, 'USER')?.args).toBe('node');
    for (const podSpec of [pod, (migrationJob.spec!.template as { spec: PodSpec }).spec]) {
      // The official image's `node` user; runAsNonRoot can only check a numeric user.
      expect(podSpec.securityContext).toEqual(
        expect.objectContaining({ runAsNonRoot: true, runAsUser: 1000 }),
      );
      const only = podSpec.containers[0]!;
      expect(only.securityContext).toEqual({
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
      });
      const writable = (podSpec.volumes ?? []).filter((volume) => volume.emptyDir !== undefined);
      const writableMounts = (only.volumeMounts ?? []).filter((mount) =>
        writable.some((volume) => volume.name === mount.name),
      );
      expect(writableMounts.map((mount) => mount.mountPath)).toEqual(
        podSpec === pod ? ['/tmp', '/var/lib/idempotency-proxy'] : ['/tmp'],
      );
    }
  });

  it('keeps the spool on its own volume, inside the mount so that the proxy can make it private', () => {
    const spool = config.store.outbox.spool;
    expect(spool).toBe('/var/lib/idempotency-proxy/spool');
    const mount = container.volumeMounts?.find((each) => spool!.startsWith(`${each.mountPath}/`));
    expect(mount?.mountPath).toBe('/var/lib/idempotency-proxy');
    const volume = pod.volumes?.find((each) => each.name === mount?.name);
    expect(volume?.emptyDir).toBeDefined();
  });

  it("spreads the replicas over zones and nodes, counting the Deployment's own pods", () => {
    const constraints = pod.topologySpreadConstraints ?? [];
    expect(constraints.map((c) => c.topologyKey).sort()).toEqual([
      'kubernetes.io/hostname',
      'topology.kubernetes.io/zone',
    ]);
    for (const constraint of constraints)
      expect(selects(constraint.labelSelector?.matchLabels, template.metadata.labels)).toBe(true);
  });

  it('selects the pods with the Deployment, the Service, the PDB and the NetworkPolicy, never the migration Job', () => {
    const proxyLabels = template.metadata.labels;
    const jobLabels = (
      migrationJob.spec!.template as { metadata: { labels: Record<string, string> } }
    ).metadata.labels;
    const selectors = {
      deployment: matchLabels(deployment),
      service: service.spec!.selector as Record<string, string>,
      pdb: matchLabels(pdb),
      networkPolicy: (networkPolicy.spec!.podSelector as { matchLabels: Record<string, string> })
        .matchLabels,
    };
    for (const [name, selector] of Object.entries(selectors)) {
      expect({ name, proxy: selects(selector, proxyLabels) }).toEqual({ name, proxy: true });
      expect({ name, job: selects(selector, jobLabels) }).toEqual({ name, job: false });
    }
  });
});

describe('the PodDisruptionBudget', () => {
  const budget = pdb.spec as { maxUnavailable?: number; minAvailable?: number };
  const replicaCounts = () => {
    const { minReplicas, maxReplicas } = hpa.spec as { minReplicas: number; maxReplicas: number };
    const counts = [deployment.spec!.replicas as number];
    for (let n = minReplicas; n <= maxReplicas; n++) counts.push(n);
    return counts;
  };

  it('lets a drain evict one replica at a time, whatever the replica count', () => {
    expect(Number.isInteger(budget.maxUnavailable)).toBe(true);
    for (const n of replicaCounts()) {
      // All Ready: one may go. One already gone or not Ready: none more.
      expect({ n, allowed: disruptionsAllowed(budget, n, n) }).toEqual({ n, allowed: 1 });
      expect({ n, allowed: disruptionsAllowed(budget, n, n - 1) }).toEqual({ n, allowed: 0 });
    }
    // What it replaced: minAvailable 1 let a drain take all but one of five at once.
    expect(disruptionsAllowed({ minAvailable: 1 }, 5, 5)).toBe(4);
  });

  it('never leaves the only replica unprotected: the Deployment and the HPA keep two or more', () => {
    expect(deployment.spec!.replicas).toBeGreaterThanOrEqual(2);
    expect((hpa.spec as { minReplicas: number }).minReplicas).toBeGreaterThanOrEqual(2);
  });

  it('lets pods that are not Ready be evicted, so a crash-looping pod cannot block a drain', () => {
    expect(pdb.spec!.unhealthyPodEvictionPolicy).toBe('AlwaysAllow');
  });
});

describe('the NetworkPolicy', () => {
  interface Peer {
    readonly namespaceSelector?: { readonly matchLabels?: Record<string, string> };
    readonly podSelector?: { readonly matchLabels?: Record<string, string> };
    readonly ipBlock?: unknown;
  }
  interface Rule {
    readonly from?: Peer[];
    readonly to?: Peer[];
    readonly ports?: { readonly port: number | string; readonly protocol?: string }[];
  }
  const spec = networkPolicy.spec as { policyTypes: string[]; ingress: Rule[]; egress: Rule[] };
  /** A rule without ports covers every port; a named port is the container's. */
  const covers = (rule: Rule, port: number, protocol = 'TCP') =>
    rule.ports === undefined ||
    rule.ports.some(
      (each) => portNumber(each.port) === port && (each.protocol ?? 'TCP') === protocol,
    );

  it('isolates the proxy pods both ways', () => {
    expect(spec.policyTypes.sort()).toEqual(['Egress', 'Ingress']);
  });

  it('lets clients reach the proxy port from anywhere', () => {
    expect(spec.ingress.some((rule) => covers(rule, config.listen.port) && !rule.from)).toBe(true);
  });

  it("lets only the monitoring namespace's Prometheus pods reach the admin port", () => {
    const admitting = spec.ingress.filter((rule) => covers(rule, config.admin.port));
    expect(admitting.length).toBeGreaterThan(0);
    for (const rule of admitting) {
      // Both selectors in one peer: those pods in that namespace, not every pod of either.
      expect(rule.from).toEqual([
        {
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
          podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } },
        },
      ]);
    }
  });

  it('lets the pods reach DNS, PostgreSQL and every upstream the config names', () => {
    const allowed = (port: number, protocol = 'TCP') =>
      spec.egress.some((rule) => covers(rule, port, protocol));
    expect([allowed(53, 'UDP'), allowed(53, 'TCP')]).toEqual([true, true]);
    expect(allowed(Number(new URL(config.store.url!).port || 5432))).toBe(true);
    for (const upstream of config.upstreams.values()) {
      const origin = new URL(upstream.origin);
      const port = Number(origin.port || (origin.protocol === 'https:' ? 443 : 80));
      expect({ upstream: upstream.name, allowed: allowed(port) }).toEqual({
        upstream: upstream.name,
        allowed: true,
      });
    }
  });

  it("the migration Job's policy lets its pods reach DNS and PostgreSQL, and nothing in", () => {
    const jobPolicy = only('NetworkPolicy', resourcesOf(COMPONENT));
    const jobSpec = jobPolicy.spec as {
      podSelector: { matchLabels: Record<string, string> };
      policyTypes: string[];
      ingress?: Rule[];
      egress: Rule[];
    };
    const jobLabels = (
      migrationJob.spec!.template as { metadata: { labels: Record<string, string> } }
    ).metadata.labels;
    expect(selects(jobSpec.podSelector.matchLabels, jobLabels)).toBe(true);
    expect(jobSpec.policyTypes.sort()).toEqual(['Egress', 'Ingress']);
    expect(jobSpec.ingress ?? []).toEqual([]);
    const ports = jobSpec.egress.flatMap((rule) =>
      (rule.ports ?? []).map((p) => `${p.port}/${p.protocol}`),
    );
    expect(ports.sort()).toEqual(['53/TCP', '53/UDP', '5432/TCP']);
  });
});

describe('the HorizontalPodAutoscaler example', () => {
  const spec = hpa.spec as {
    scaleTargetRef: { kind: string; name: string };
    minReplicas: number;
    maxReplicas: number;
    metrics: { resource?: { name: string } }[];
  };

  it('scales the Deployment on CPU, which the container requests', () => {
    expect(spec.scaleTargetRef).toMatchObject({
      kind: 'Deployment',
      name: deployment.metadata.name,
    });
    expect(spec.metrics.map((metric) => metric.resource?.name)).toEqual(['cpu']);
    const resources = (container as { resources?: { requests?: { cpu?: string } } }).resources;
    expect(resources?.requests?.cpu).toBeDefined();
  });

  it("keeps every replica's connections within PostgreSQL's default max_connections", () => {
    // 100 by default, 3 of them kept for superusers; each replica's pool plus its LISTEN connection,
    // and one for a migrate or prune command.
    const perReplica = config.store.poolSize + 1;
    expect(spec.maxReplicas * perReplica + 1).toBeLessThanOrEqual(100 - 3);
  });
});

describe("the probes' paths on a proxy serving the ConfigMap's config", () => {
  it('answer 200 on the admin listener once the store is ready, and so does /metrics', async () => {
    const proxy = await startProxy({
      // The suite's database and a table of its own; everything else as the ConfigMap says.
      yaml: configText().replace(/table: \S+/, 'table: ${TEST_TABLE}'),
      env: containerEnv(),
    });
    try {
      const paths = [
        container.readinessProbe?.httpGet?.path,
        container.livenessProbe?.httpGet?.path,
        template.metadata.annotations?.['prometheus.io/path'],
      ];
      for (const probePath of paths) {
        const answer = await send(`${proxy.adminUrl}${probePath ?? ''}`, { method: 'GET' });
        expect({ path: probePath, status: answer.status }).toEqual({
          path: probePath,
          status: 200,
        });
      }
    } finally {
      await proxy.close();
    }
  });
});
