// docker-compose.yml, checked without a Docker engine: valid against the Compose Specification's JSON
// Schema (test/deploy/compose-spec.schema.json, see compose-spec.SOURCE.md), and in agreement with
// config/proxy.yaml as the proxy would resolve it inside its container (compose `environment` plus
// the image's ENV), so `docker compose up` serves the README's curl lines unchanged.
import fs from 'node:fs';
import path from 'node:path';
import Ajv, { type AnySchemaObject } from 'ajv';
import draft07MetaSchema from 'ajv/dist/refs/json-schema-draft-07.json';
import { parse } from 'yaml';
import { interpolate } from '../../src/compiler/interpolate';
import { parseConfigText } from '../../src/compiler/load';
import type { ProxyConfig } from '../../src/config/types';
import {
  execForm,
  imageEnv,
  lastOf,
  readDockerfile,
  REPO_ROOT,
  stageNamed,
} from './docker-build-inputs';

type Scalar = string | number | boolean | null;

/** The parts of a compose service these checks read; the schema has vouched for their shapes. */
interface ComposeService {
  readonly image?: string;
  readonly build?: string | { readonly context?: string; readonly target?: string };
  readonly command?: string | string[] | null;
  readonly entrypoint?: string | string[] | null;
  readonly environment?: Record<string, Scalar> | string[];
  readonly ports?: (number | string | PortObject)[];
  readonly expose?: (string | number)[];
  readonly volumes?: (string | VolumeObject)[];
  readonly depends_on?: string[] | Record<string, { readonly condition: string }>;
  readonly healthcheck?: { readonly test?: string | string[]; readonly disable?: boolean };
  readonly restart?: string;
  readonly stop_grace_period?: string;
  readonly privileged?: boolean | string;
  readonly cap_add?: string[];
  readonly network_mode?: string;
  readonly pid?: string | null;
  readonly user?: string;
  readonly read_only?: boolean | string;
  readonly tmpfs?: string | string[];
}

interface PortObject {
  readonly target: number | string;
  readonly published?: number | string;
  readonly host_ip?: string;
}

interface VolumeObject {
  readonly type: string;
  readonly source?: string;
  readonly target?: string;
  readonly read_only?: boolean | string;
}

interface ComposeFile {
  readonly version?: string;
  readonly services: Record<string, ComposeService>;
  readonly volumes?: Record<string, unknown>;
}

const COMPOSE_FILE = path.join(REPO_ROOT, 'docker-compose.yml');
const CONFIG_FILE = path.join(REPO_ROOT, 'config/proxy.yaml');
const rawCompose: unknown = parse(fs.readFileSync(COMPOSE_FILE, 'utf8'));
const dockerfile = readDockerfile();

/**
 * Compose interpolates `${VAR:-default}` from the shell that runs it; the README's `docker compose
 * up` runs from a clean shell, so every reference resolves to its default. Compose's rules for
 * `${VAR}` and `${VAR:-default}` are the ones src/compiler/interpolate.ts implements.
 */
function interpolated(value: unknown, hostEnv: NodeJS.ProcessEnv, problems: string[]): unknown {
  if (typeof value === 'string') {
    const result = interpolate(value, hostEnv);
    problems.push(...result.problems);
    return result.value;
  }
  if (Array.isArray(value)) return value.map((item) => interpolated(item, hostEnv, problems));
  if (value !== null && typeof value === 'object')
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, interpolated(item, hostEnv, problems)]),
    );
  return value;
}

const interpolationProblems: string[] = [];
const resolved = interpolated(rawCompose, {}, interpolationProblems);
const compose = resolved as ComposeFile;

function service(name: string): ComposeService {
  const found = compose.services[name];
  if (!found) throw new Error(`docker-compose.yml has no service "${name}"`);
  return found;
}

function environmentOf(entry: ComposeService): Record<string, string> {
  const env = entry.environment ?? {};
  if (Array.isArray(env))
    return Object.fromEntries(
      env.map((pair) => [pair.split('=')[0]!, pair.split('=').slice(1).join('=')]),
    );
  return Object.fromEntries(
    Object.entries(env).map(([key, value]) => [key, value === null ? '' : String(value)]),
  );
}

interface Published {
  readonly hostIp: string | undefined;
  readonly hostPort: number | undefined;
  readonly containerPort: number;
}

/** Short syntax `[HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]` or the long form. */
function publishedPorts(entry: ComposeService): Published[] {
  return (entry.ports ?? []).map((port) => {
    if (typeof port === 'object')
      return {
        hostIp: port.host_ip,
        hostPort: port.published === undefined ? undefined : Number(port.published),
        containerPort: Number(port.target),
      };
    const parts = String(port)
      .replace(/\/(tcp|udp)$/, '')
      .split(':');
    const containerPort = Number(parts.pop());
    const hostPort = parts.length > 0 ? Number(parts.pop()) : undefined;
    return { hostIp: parts.pop(), hostPort, containerPort };
  });
}

interface Mount {
  readonly source: string | undefined;
  readonly target: string;
  readonly readOnly: boolean;
}

/** Short syntax `SOURCE:TARGET[:MODE]` or the long form. */
function mounts(entry: ComposeService): Mount[] {
  return (entry.volumes ?? []).map((volume) => {
    if (typeof volume === 'object')
      return {
        source: volume.source,
        target: volume.target ?? '',
        readOnly: volume.read_only === true || volume.read_only === 'true',
      };
    const [source, target = '', mode = ''] = volume.split(':');
    return { source, target, readOnly: mode.split(',').includes('ro') };
  });
}

/** Go-style durations as compose writes them: "20s", "1m30s", "500ms". */
function durationMs(text: string): number {
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (parts.map((part) => part[0]).join('') !== text) throw new Error(`not a duration: ${text}`);
  return parts.reduce((sum, [, amount, unit]) => sum + Number(amount) * units[unit!]!, 0);
}

function buildTarget(entry: ComposeService): string | undefined {
  return typeof entry.build === 'object' ? entry.build.target : undefined;
}

/** config/proxy.yaml as the proxy container reads it: the image's ENV, then compose's environment. */
function configInProxyContainer(): ProxyConfig {
  const target = buildTarget(service('proxy'));
  const env = {
    ...imageEnv(dockerfile, stageNamed(dockerfile, target)),
    ...environmentOf(service('proxy')),
  };
  return parseConfigText(fs.readFileSync(CONFIG_FILE, 'utf8'), CONFIG_FILE, env);
}

const WILDCARD_HOSTS = ['0.0.0.0', '::'];

describe('docker-compose.yml is a valid Compose file', () => {
  const schema = JSON.parse(
    fs.readFileSync(path.join(__dirname, 'compose-spec.schema.json'), 'utf8'),
  ) as AnySchemaObject;

  function validator() {
    // The schema declares "$schema": "https://json-schema.org/draft-07/schema" (https, no "#"); Ajv
    // knows draft-07 as http://json-schema.org/draft-07/schema#. Registering the same meta-schema
    // under the spelling the file uses keeps the file byte-for-byte as published and still has Ajv
    // check the schema itself. Strict mode stays on (unknown keywords, ignored keywords) except
    // strictTypes: the published schema puts object keywords beside "type": "array" (gpus:
    // additionalProperties next to items) and types many fields as unions (a value or an
    // interpolated string), so strictTypes rejects the spec as published.
    const ajv = new Ajv({ strict: true, strictTypes: false, allErrors: true });
    ajv.addMetaSchema({ ...draft07MetaSchema, $id: String(schema.$schema) });
    return ajv.compile(schema);
  }

  it('validates against the Compose Specification JSON Schema', () => {
    const validate = validator();
    const valid = validate(resolved);
    expect(validate.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('the schema is strict enough to reject a misspelt service key', () => {
    const validate = validator();
    const broken = { services: { proxy: { ...service('proxy'), depends_onn: ['postgres'] } } };
    expect(validate(broken)).toBe(false);
  });

  it('has no obsolete top-level version key', () => {
    expect(compose.version).toBeUndefined();
  });

  it('needs no .env file: every ${VAR} has a default', () => {
    expect(interpolationProblems).toEqual([]);
  });

  it('runs postgres, the demo payments service and the proxy', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['payments', 'postgres', 'proxy']);
  });
});

describe('docker-compose.yml agrees with config/proxy.yaml and the Dockerfile', () => {
  const config = configInProxyContainer();

  it("publishes the proxy's listen.port on the host port the README's curl lines use", () => {
    const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
    const readmePorts = new Set(
      [...readme.matchAll(/curl [^\n]*localhost:(\d+)\/refunds/g)].map((m) => Number(m[1])),
    );
    expect([...readmePorts]).toHaveLength(1);
    const client = publishedPorts(service('proxy')).find(
      (port) => port.containerPort === config.listen.port,
    );
    expect(client?.hostPort).toBe([...readmePorts][0]);
  });

  it('listens for client traffic on every interface in the container, so the published port reaches it', () => {
    expect(WILDCARD_HOSTS).toContain(config.listen.host);
    expect(environmentOf(service('proxy')).PROXY_HOST).toBe('0.0.0.0');
  });

  it('config/proxy.yaml alone (`npm start`) listens on loopback: only the container opens it up', () => {
    const plain = parseConfigText(fs.readFileSync(CONFIG_FILE, 'utf8'), CONFIG_FILE, {});
    expect({ listen: plain.listen.host, admin: plain.admin.host }).toEqual({
      listen: '127.0.0.1',
      admin: '127.0.0.1',
    });
  });

  it("publishes the proxy's admin.port, bound to the host's loopback only", () => {
    const admin = publishedPorts(service('proxy')).find(
      (port) => port.containerPort === config.admin.port,
    );
    expect(admin).toEqual({
      hostIp: '127.0.0.1',
      hostPort: config.admin.port,
      containerPort: config.admin.port,
    });
  });

  it('admin.host accepts connections from outside the container (ADMIN_HOST), so the published admin port works', () => {
    // `npm start` keeps the admin listener on 127.0.0.1; only the container overrides it.
    const adminHost = environmentOf(service('proxy')).ADMIN_HOST;
    expect(WILDCARD_HOSTS).toContain(adminHost);
    const needs = 'config/proxy.yaml admin block: host: ${ADMIN_HOST:-127.0.0.1}';
    expect({ resolved: config.admin.host, needs }).toEqual({ resolved: adminHost, needs });
  });

  it('points store.url at the postgres service, with its user, password and database', () => {
    const url = new URL(config.store.url ?? 'postgres://missing');
    const env = environmentOf(service('postgres'));
    expect(Object.keys(compose.services)).toContain(url.hostname);
    expect(url.hostname).toBe('postgres');
    expect(url.port || '5432').toBe(env.PGPORT ?? '5432');
    expect(decodeURIComponent(url.username)).toBe(env.POSTGRES_USER);
    expect(decodeURIComponent(url.password)).toBe(env.POSTGRES_PASSWORD);
    expect(url.pathname).toBe(`/${env.POSTGRES_DB}`);
  });

  it('points the payments upstream at the payments service, on the port it listens on', () => {
    const upstream = config.upstreams.get('payments');
    const url = new URL(upstream?.origin ?? 'http://missing');
    const payments = service('payments');
    const env = {
      ...imageEnv(dockerfile, stageNamed(dockerfile, buildTarget(payments))),
      ...environmentOf(payments),
    };
    expect(url.hostname).toBe('payments');
    expect(url.port).toBe(env.PAYMENTS_PORT);
    expect(env.PAYMENTS_HOST).toBe('0.0.0.0');
    expect((payments.expose ?? []).map(String)).toContain(env.PAYMENTS_PORT);
    expect(config.routes.every((route) => route.upstream.name === 'payments')).toBe(true);
  });

  it("mounts ./config read-only where the image's CMD reads config/proxy.yaml", () => {
    const proxy = stageNamed(dockerfile, buildTarget(service('proxy')));
    const workdir = lastOf(dockerfile, proxy, 'WORKDIR')?.args ?? '';
    const cmd = execForm(lastOf(dockerfile, proxy, 'CMD')?.args ?? '') ?? [];
    const configArg = cmd[cmd.indexOf('--config') + 1] ?? '';
    const configDir = path.posix.join(workdir, path.posix.dirname(configArg));
    const mount = mounts(service('proxy')).find((each) => each.target === configDir);
    expect(mount).toEqual({ source: './config', target: configDir, readOnly: true });
    expect(path.resolve(REPO_ROOT, mount?.source ?? '')).toBe(path.dirname(CONFIG_FILE));
    expect(service('proxy').command).toBeUndefined();
    expect(service('proxy').entrypoint).toBeUndefined();
  });

  it('builds each service from a stage the Dockerfile defines', () => {
    expect(buildTarget(service('proxy'))).toBe('proxy');
    expect(buildTarget(service('payments'))).toBe('payments');
    for (const name of ['proxy', 'payments']) {
      const build = service(name).build;
      const context = typeof build === 'object' ? build.context : build;
      expect(path.resolve(REPO_ROOT, context ?? '')).toBe(REPO_ROOT);
      expect(() => stageNamed(dockerfile, buildTarget(service(name)))).not.toThrow();
    }
  });

  it('starts the proxy after postgres is healthy and payments has started', () => {
    expect(service('proxy').depends_on).toEqual({
      postgres: { condition: 'service_healthy' },
      payments: { condition: 'service_started' },
    });
  });

  it('checks postgres with pg_isready over TCP, for its own user and database', () => {
    const env = environmentOf(service('postgres'));
    const test = service('postgres').healthcheck?.test;
    expect(test).toEqual(
      expect.arrayContaining(['CMD', 'pg_isready', '-h', '127.0.0.1', '-U', env.POSTGRES_USER]),
    );
    expect(test).toEqual(expect.arrayContaining(['-d', env.POSTGRES_DB]));
  });

  it('checks the proxy with GET /readyz on its admin.port, like the Dockerfile', () => {
    const test = service('proxy').healthcheck?.test ?? [];
    expect(test.slice(0, 3)).toEqual(['CMD', 'node', '-e']);
    expect(test[3]).toContain(`fetch('http://127.0.0.1:${config.admin.port}/readyz')`);
    const image = execForm(
      (lastOf(dockerfile, stageNamed(dockerfile, 'proxy'), 'HEALTHCHECK')?.args ?? '').replace(
        /^.*?CMD\s+/s,
        '',
      ),
    );
    expect(test.slice(1)).toEqual(image);
  });

  it('payments keeps the healthcheck of its Dockerfile stage', () => {
    expect(service('payments').healthcheck).toBeUndefined();
    const stage = stageNamed(dockerfile, buildTarget(service('payments')));
    expect(lastOf(dockerfile, stage, 'HEALTHCHECK')?.args).toContain('/health');
  });

  it('keeps postgres data in a declared named volume at the PGDATA of postgres 17', () => {
    // postgres:18 and later keep data under /var/lib/postgresql/<major>/docker instead.
    expect(service('postgres').image).toMatch(/^postgres:1[67](\.|-|$)/);
    const data = mounts(service('postgres')).find(
      (each) => each.target === '/var/lib/postgresql/data',
    );
    expect(data?.source).toBeDefined();
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source);
  });

  it('gives the proxy longer to stop than shutdownGrace plus store.outbox.drainTimeout, so answers are stored', () => {
    const grace = service('proxy').stop_grace_period ?? '10s';
    expect(durationMs(grace)).toBeGreaterThan(
      config.shutdownGraceMs + config.store.outbox.drainTimeoutMs,
    );
  });

  it('runs the proxy on a read-only root filesystem, with a tmpfs only on /tmp', () => {
    const proxy = service('proxy');
    expect(proxy.read_only).toBe(true);
    const tmpfs = [proxy.tmpfs ?? []].flat().map((entry) => entry.split(':')[0]);
    expect(tmpfs).toEqual(['/tmp']);
    // Everything else the container may write is a volume: the config is mounted read-only, and
    // the one writable volume holds the spool.
    expect(mounts(proxy).map(({ target, readOnly }) => [target, readOnly])).toEqual([
      ['/app/config', true],
      ['/var/lib/idempotency-proxy', false],
    ]);
  });

  it('keeps the spool on a named volume that outlives the container', () => {
    const spool = config.store.outbox.spool;
    expect(spool).toBe('/var/lib/idempotency-proxy/spool');
    const mount = mounts(service('proxy')).find((each) => spool!.startsWith(`${each.target}/`));
    expect(mount?.source).toBe('spool');
    expect(Object.keys(compose.volumes ?? {})).toContain('spool');
  });

  it('restarts a crashed proxy a few times, never a config error in a loop', () => {
    expect(service('proxy').restart).toBe('on-failure:3');
  });

  it('passes ADMIN_TOKEN from the host, empty (keys API off) by default', () => {
    const raw = (rawCompose as ComposeFile).services.proxy?.environment;
    expect(raw).toEqual(expect.objectContaining({ ADMIN_TOKEN: '${ADMIN_TOKEN:-}' }));
    expect(config.admin.token).toBeUndefined();
  });

  it('runs no service privileged, with added capabilities, in host namespaces, with the Docker socket or as an explicit root user', () => {
    for (const [name, entry] of Object.entries(compose.services)) {
      expect({ name, privileged: entry.privileged ?? false }).toEqual({ name, privileged: false });
      expect({ name, cap_add: entry.cap_add ?? [] }).toEqual({ name, cap_add: [] });
      expect({ name, network: entry.network_mode ?? '' }).toEqual({ name, network: '' });
      expect({ name, pid: entry.pid ?? '' }).toEqual({ name, pid: '' });
      expect({ name, user: entry.user ?? '' }).not.toEqual({ name, user: 'root' });
      const sockets = mounts(entry).filter((mount) => mount.source?.includes('docker.sock'));
      expect(sockets).toEqual([]);
    }
  });
});
