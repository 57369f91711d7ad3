// config/kubernetes/, checked without a cluster: the ConfigMap's proxy.yaml loads through the
// proxy's own loader with the container's environment, and the Deployment agrees with it (ports,
// probes, grace period); the probes' paths answer 200 on a proxy serving that very config.
import fs from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { parseConfigText } from '../../src/config/load';
import type { ProxyConfig } from '../../src/config/types';
import { send } from '../support/http';
import { startProxy } from '../support/proxy';
import { readDockerfile, REPO_ROOT, stageNamed, lastOf } from './docker-build-inputs';

const DIR = path.join(REPO_ROOT, 'config/kubernetes');

interface Manifest {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: { readonly name: string; readonly labels?: Record<string, string> };
  readonly spec?: Record<string, unknown>;
  readonly data?: Record<string, string>;
}

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
    readonly valueFrom?: { readonly secretKeyRef?: { readonly name: string } };
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

const manifests: Manifest[] = fs
  .readdirSync(DIR)
  .filter((file) => file.endsWith('.yaml'))
  .flatMap((file) =>
    parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8')).map((doc) => {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]!.message}`);
      return doc.toJS() as Manifest;
    }),
  );

function only(kind: string): Manifest {
  const found = manifests.filter((manifest) => manifest.kind === kind);
  if (found.length !== 1) throw new Error(`expected one ${kind}, found ${found.length}`);
  return found[0]!;
}

const deployment = only('Deployment');
const service = only('Service');
const pdb = only('PodDisruptionBudget');
const configMap = only('ConfigMap');
const template = deployment.spec!.template as {
  metadata: { labels: Record<string, string> };
  spec: PodSpec;
};
const pod = template.spec;
const container = pod.containers[0]!;

/** Where the container reads its config: the --config argument, in the ConfigMap's mount. */
function configFile(): { mount: string; key: string } {
  const args = container.args ?? [];
  const file = args[args.indexOf('--config') + 1] ?? '';
  return { mount: path.posix.dirname(file), key: path.posix.basename(file) };
}

/** The container's environment: literal values, and a stand-in for each one from a Secret. */
function containerEnv(): NodeJS.ProcessEnv {
  const stand_in: Record<string, string> = {
    DATABASE_URL: 'postgres://proxy:secret@postgres:5432/idempotency',
    ADMIN_TOKEN: 'a-token-from-the-secret',
  };
  return Object.fromEntries(
    (container.env ?? []).map((entry) => [entry.name, entry.value ?? stand_in[entry.name] ?? 'x']),
  );
}

const configText = () => configMap.data?.[configFile().key] ?? '';
const config: ProxyConfig = parseConfigText(configText(), 'configmap proxy.yaml', containerEnv());

/** A probe's or Service's port, named or numbered, as the container's port number. */
function portNumber(port: number | string | undefined): number | undefined {
  if (typeof port === 'number') return port;
  return container.ports?.find((each) => each.name === port)?.containerPort;
}

const WILDCARD_HOSTS = ['0.0.0.0', '::'];

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

  it("exposes listen.port as the container's http port, on every interface, and the Service sends there", () => {
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

  it('gives a pod longer to stop than its preStop pause plus the drain (shutdownGrace)', () => {
    const command = container.lifecycle?.preStop?.exec?.command ?? [];
    const pauseMs = command[0] === 'sleep' ? Number(command[1]) * 1000 : 0;
    expect(Number.isFinite(pauseMs)).toBe(true);
    const graceMs = (pod.terminationGracePeriodSeconds ?? 30) * 1000;
    expect(graceMs).toBeGreaterThan(pauseMs + config.shutdownGraceMs);
  });

  it("runs as the image's non-root user on a read-only root filesystem, with only /tmp writable", () => {
    const image = stageNamed(readDockerfile(), 'proxy');
    expect(lastOf(readDockerfile(), image, 'USER')?.args).toBe('node');
    // The official image's `node` user; runAsNonRoot can only check a numeric user.
    expect(pod.securityContext).toEqual(
      expect.objectContaining({ runAsNonRoot: true, runAsUser: 1000 }),
    );
    expect(container.securityContext).toEqual({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
    const writable = (pod.volumes ?? []).filter((volume) => volume.emptyDir !== undefined);
    const writableMounts = (container.volumeMounts ?? []).filter((mount) =>
      writable.some((volume) => volume.name === mount.name),
    );
    expect(writableMounts.map((mount) => mount.mountPath)).toEqual(['/tmp']);
  });

  it('selects the pods with the Service and the PodDisruptionBudget, which keeps one of several', () => {
    const labels = template.metadata.labels;
    const matches = (selector: Record<string, string>) =>
      Object.entries(selector).every(([key, value]) => labels[key] === value);
    expect(
      matches((deployment.spec!.selector as { matchLabels: Record<string, string> }).matchLabels),
    ).toBe(true);
    expect(matches(service.spec!.selector as Record<string, string>)).toBe(true);
    expect(
      matches((pdb.spec!.selector as { matchLabels: Record<string, string> }).matchLabels),
    ).toBe(true);
    const replicas = deployment.spec!.replicas as number;
    const minAvailable = pdb.spec!.minAvailable as number;
    expect(minAvailable).toBeGreaterThanOrEqual(1);
    expect(minAvailable).toBeLessThan(replicas);
  });
});

describe("the probes' paths on a proxy serving the ConfigMap's config", () => {
  it('answer 200 on the admin listener once the store is ready', async () => {
    const proxy = await startProxy({
      // The suite's database and a table of its own; everything else as the ConfigMap says.
      yaml: configText().replace(/table: \S+/, 'table: ${TEST_TABLE}'),
      env: containerEnv(),
    });
    try {
      for (const probe of [container.readinessProbe, container.livenessProbe]) {
        const answer = await send(`${proxy.adminUrl}${probe?.httpGet?.path ?? ''}`, {
          method: 'GET',
        });
        expect({ path: probe?.httpGet?.path, status: answer.status }).toEqual({
          path: probe?.httpGet?.path,
          status: 200,
        });
      }
    } finally {
      await proxy.close();
    }
  });
});
