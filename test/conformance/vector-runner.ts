// Loads the anyonce conformance vectors (anyonce/*.json, schema.json) and executes them over real
// HTTP against an idempotency layer in front of the fixture upstream, per anyonce's execution rules
// (anyonce/README.md). A result lists every broken expectation as one exact sentence, so a test can
// assert "passes" or "fails with exactly these known differences".
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

export type HeaderExpectation = string | { present: true } | { absent: true } | { regex: string };
export type JsonScalar = string | number | boolean | null;

export interface VectorRequest {
  readonly method: string;
  readonly path: string;
  /** In file order: names are sent exactly as spelled here. */
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string;
}

export interface StepExpectation {
  readonly status: number;
  readonly headers?: Readonly<Record<string, HeaderExpectation>>;
  readonly bodyEquals?: string | { sameAs: string };
  readonly bodyJson?: Readonly<Record<string, JsonScalar>>;
  readonly bodyBytes?: number;
  readonly handlerInvocations?: number;
}

export interface VectorStep {
  readonly id: string;
  readonly delayMs?: number;
  readonly concurrentWith?: readonly string[];
  readonly request: VectorRequest;
  readonly expect: StepExpectation;
}

export interface Vector {
  readonly id: string;
  readonly tier: 'core' | 'profile';
  readonly title: string;
  readonly description: string;
  readonly requires: readonly 'short-ttl'[];
  readonly steps: readonly VectorStep[];
}

export interface VectorResult {
  readonly id: string;
  readonly status: 'pass' | 'fail' | 'not-applicable';
  readonly failures: string[];
}

export interface RunTarget {
  /** The idempotency layer in front of the fixture: every step and GET /counter go here. */
  readonly proxyUrl: string;
  /** The fixture itself: POST /reset goes here directly, never through the layer. */
  readonly fixtureUrl: string;
  /** The layer's TTL for completed keys; `short-ttl` vectors run only when it is ≤ 2000 ms. */
  readonly ttlMs?: number;
}

/** anyonce's "short-ttl" capability: a target whose TTL is at most this. */
export const SHORT_TTL_MAX_MS = 2_000;
/** A hung layer becomes a failure sentence instead of a jest timeout. */
const REQUEST_IDLE_TIMEOUT_MS = 20_000;

// ---------------------------------------------------------------------------------------------
// Loading. Members are checked against schema.json's shape (additionalProperties: false there), so
// an expectation this runner does not implement makes loading fail instead of being skipped.

const KNOWN_MEMBERS = {
  vector: ['id', 'tier', 'title', 'draftRef', 'description', 'requires', 'fixture', 'steps'],
  step: ['id', 'delayMs', 'concurrentWith', 'request', 'expect'],
  request: ['method', 'path', 'headers', 'body'],
  expect: ['status', 'headers', 'bodyEquals', 'bodyJson', 'bodyBytes', 'handlerInvocations'],
  header: ['present', 'absent', 'regex'],
  bodyEquals: ['sameAs'],
} as const;

/** The vectors in `dir` (e.g. anyonce/core), by file name; each id must match its file. */
export function loadVectors(dir: string): Vector[] {
  const folder = path.basename(dir);
  return fs
    .readdirSync(dir)
    .filter((file) => file.endsWith('.json'))
    .sort()
    .map((file) => {
      const where = `${folder}/${file}`;
      const vector = parseVector(JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8')), where);
      if (vector.id !== where.slice(0, -'.json'.length)) {
        throw new Error(`${where}: id "${vector.id}" does not match the file name`);
      }
      return vector;
    });
}

export function parseVector(value: unknown, where: string): Vector {
  const v = object(value, KNOWN_MEMBERS.vector, where);
  const requires = v.requires ?? [];
  if (!Array.isArray(requires) || requires.some((item) => item !== 'short-ttl')) {
    throw new Error(`${where}: requires may only list "short-ttl"`);
  }
  if (!Array.isArray(v.steps) || v.steps.length === 0) throw new Error(`${where}: no steps`);
  const seen = new Set<string>();
  for (const [index, raw] of v.steps.entries()) {
    const at = `${where} steps[${index}]`;
    const step = object(raw, KNOWN_MEMBERS.step, at);
    const e = object(step.expect, KNOWN_MEMBERS.expect, `${at}.expect`);
    object(step.request, KNOWN_MEMBERS.request, `${at}.request`);
    for (const header of Object.values(object(e.headers ?? {}, null, `${at}.expect.headers`))) {
      if (typeof header !== 'string') object(header, KNOWN_MEMBERS.header, `${at}.expect.headers`);
    }
    if (typeof step.id !== 'string' || seen.has(step.id))
      throw new Error(`${at}: missing or repeated id`);
    if (typeof e.status !== 'number') throw new Error(`${at}: expect.status is not a number`);
    // Groups and sameAs may only look back: an earlier step's response is what they refer to.
    const sameAs =
      typeof e.bodyEquals === 'object'
        ? object(e.bodyEquals, KNOWN_MEMBERS.bodyEquals, at).sameAs
        : undefined;
    const concurrentWith: unknown[] = Array.isArray(step.concurrentWith) ? step.concurrentWith : [];
    for (const ref of [...concurrentWith, ...(sameAs === undefined ? [] : [sameAs])]) {
      if (typeof ref !== 'string' || !seen.has(ref))
        throw new Error(`${at}: refers to ${String(ref)}, not an earlier step`);
    }
    seen.add(step.id);
  }
  return { ...(v as unknown as Vector), requires: requires as 'short-ttl'[] };
}

/** `value` as an object whose members are all in `known` (null: any names). */
function object(
  value: unknown,
  known: readonly string[] | null,
  where: string,
): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`${where}: expected an object`);
  const unknown = known === null ? [] : Object.keys(value).filter((name) => !known.includes(name));
  if (unknown.length > 0)
    throw new Error(
      `${where}: unknown member ${unknown.join(', ')} (not implemented by this runner)`,
    );
  return value as Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// Running.

/** One step's HTTP exchange: a response, or why there was none. */
type Exchange =
  | {
      readonly ok: true;
      readonly status: number;
      readonly headers: http.IncomingHttpHeaders;
      readonly body: Buffer;
    }
  | { readonly ok: false; readonly error: string };

type CounterRead =
  { readonly ok: true; readonly count: number } | { readonly ok: false; readonly error: string };

export async function runVector(vector: Vector, target: RunTarget): Promise<VectorResult> {
  const { id } = vector;
  if (
    vector.requires.includes('short-ttl') &&
    !(target.ttlMs !== undefined && target.ttlMs <= SHORT_TTL_MAX_MS)
  ) {
    return { id, status: 'not-applicable', failures: [] };
  }
  // The reset goes to the fixture itself: it is the one control route that is not behind the layer.
  const reset = await exchange(target.fixtureUrl, { method: 'POST', path: '/reset' });
  if (!reset.ok || reset.status !== 204) {
    return {
      id,
      status: 'fail',
      failures: [`POST /reset at the fixture failed: ${describe(reset)}`],
    };
  }

  const failures: string[] = [];
  // A step a later step names in concurrentWith is sent and left pending until that step's group.
  const leftPending = new Set(vector.steps.flatMap((step) => step.concurrentWith ?? []));
  const pending = new Map<string, Promise<Exchange>>();
  const answered = new Map<string, Exchange>();
  for (const step of vector.steps) {
    if (step.delayMs !== undefined) await sleep(step.delayMs);
    const sent = exchange(target.proxyUrl, step.request);
    if (leftPending.has(step.id)) {
      pending.set(step.id, sent);
      continue;
    }
    const group = [...(step.concurrentWith ?? []), step.id];
    const exchanges = await Promise.all(
      group.map((member) =>
        member === step.id ? sent : (pending.get(member) ?? missingStep(member)),
      ),
    );
    group.forEach((member, index) => answered.set(member, exchanges[index]!));
    const members = vector.steps.filter((s) => group.includes(s.id));
    // One GET /counter, through the layer, after the whole group settled.
    const counter = members.some((s) => s.expect.handlerInvocations !== undefined)
      ? await readCounter(target.proxyUrl)
      : undefined;
    for (const member of members) failures.push(...checkStep(member, answered, counter));
  }
  return { id, status: failures.length === 0 ? 'pass' : 'fail', failures };
}

/** Runs vectors one after another: they share the fixture's one counter. */
export async function runVectors(
  vectors: readonly Vector[],
  target: RunTarget,
): Promise<VectorResult[]> {
  const results: VectorResult[] = [];
  for (const vector of vectors) results.push(await runVector(vector, target));
  return results;
}

function missingStep(id: string): Promise<Exchange> {
  return Promise.resolve({ ok: false, error: `step "${id}" was never sent (runner bug)` });
}

async function readCounter(proxyUrl: string): Promise<CounterRead> {
  const res = await exchange(proxyUrl, { method: 'GET', path: '/counter' });
  if (res.ok && res.status === 200) {
    try {
      const parsed = JSON.parse(res.body.toString('utf8')) as { count?: unknown };
      if (typeof parsed.count === 'number') return { ok: true, count: parsed.count };
    } catch {
      // reported below with the body
    }
  }
  return { ok: false, error: `GET /counter through the layer answered ${describe(res)}` };
}

function checkStep(
  step: VectorStep,
  answered: ReadonlyMap<string, Exchange>,
  counter: CounterRead | undefined,
): string[] {
  const failures: string[] = [];
  const fail = (sentence: string): void => {
    failures.push(`step "${step.id}": ${sentence}`);
  };
  const expect = step.expect;
  const res = answered.get(step.id);
  if (res === undefined || !res.ok) {
    fail(`request failed: ${res === undefined ? 'no exchange recorded' : res.error}`);
  } else {
    if (res.status !== expect.status) fail(`status expected ${expect.status}, got ${res.status}`);
    for (const [name, want] of Object.entries(expect.headers ?? {})) {
      const problem = checkHeader(headerValue(res.headers, name), want);
      if (problem !== undefined) fail(`header ${name} expected ${problem}`);
    }
    if (typeof expect.bodyEquals === 'string' && !res.body.equals(Buffer.from(expect.bodyEquals))) {
      fail(`body expected ${JSON.stringify(expect.bodyEquals)}, got ${preview(res.body)}`);
    }
    if (typeof expect.bodyEquals === 'object') {
      const other = expect.bodyEquals.sameAs;
      const earlier = answered.get(other);
      if (earlier === undefined || !earlier.ok)
        fail(`body expected the same bytes as step "${other}", which has no response`);
      else if (!res.body.equals(earlier.body)) {
        fail(
          `body expected the same bytes as step "${other}" (${preview(earlier.body)}), got ${preview(res.body)}`,
        );
      }
    }
    if (expect.bodyJson !== undefined)
      failures.push(...checkJson(step.id, res.body, expect.bodyJson));
    if (expect.bodyBytes !== undefined && res.body.length !== expect.bodyBytes) {
      fail(`body expected ${expect.bodyBytes} bytes, got ${res.body.length}`);
    }
  }
  if (expect.handlerInvocations !== undefined) {
    if (counter === undefined || !counter.ok) {
      fail(
        `handlerInvocations expected ${expect.handlerInvocations}, but ${counter?.error ?? 'the counter was not read'}`,
      );
    } else if (counter.count !== expect.handlerInvocations) {
      fail(`handlerInvocations expected ${expect.handlerInvocations}, got ${counter.count}`);
    }
  }
  return failures;
}

/** The rest of "header X expected …", or undefined when the value meets the expectation. */
function checkHeader(got: string | undefined, want: HeaderExpectation): string | undefined {
  const shown = got === undefined ? 'absent' : JSON.stringify(got);
  if (typeof want === 'string')
    return got === want ? undefined : `${JSON.stringify(want)}, got ${shown}`;
  if ('present' in want) return got !== undefined ? undefined : `present, got absent`;
  if ('absent' in want) return got === undefined ? undefined : `absent, got ${shown}`;
  return got !== undefined && new RegExp(want.regex).test(got)
    ? undefined
    : `to match /${want.regex}/, got ${shown}`;
}

/** Field names are case-insensitive (RFC 9110 §5.1); repeated fields are joined as a list. */
function headerValue(headers: http.IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(', ') : value;
}

function checkJson(
  stepId: string,
  body: Buffer,
  want: Readonly<Record<string, JsonScalar>>,
): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    parsed = undefined;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return [`step "${stepId}": bodyJson expected a JSON object body, got ${preview(body)}`];
  }
  const object = parsed as Record<string, unknown>;
  return Object.entries(want).flatMap(([member, value]) => {
    const got = object[member];
    if (got === value) return [];
    const shown = got === undefined ? 'absent' : JSON.stringify(got);
    return [
      `step "${stepId}": bodyJson member "${member}" expected ${JSON.stringify(value)}, got ${shown}`,
    ];
  });
}

/** A body in a failure sentence: quoted, cut at 80 characters, with its size when cut. */
function preview(body: Buffer): string {
  const textBody = body.toString('utf8');
  if (textBody.length <= 80) return JSON.stringify(textBody);
  return `${JSON.stringify(`${textBody.slice(0, 80)}…`)} (${body.length} bytes)`;
}

function describe(res: Exchange): string {
  return res.ok ? `${res.status} ${preview(res.body)}` : res.error;
}

/**
 * Sends one request with node:http and raw header pairs, so names keep the vector's spelling and
 * order (fetch would lowercase them). Node sends an array of headers verbatim: it adds neither Host
 * nor Content-Length (it would fall back to chunked), so both are added here unless the vector
 * sets them. Never rejects: a transport error is an Exchange too.
 */
function exchange(baseUrl: string, request: VectorRequest): Promise<Exchange> {
  const url = new URL(request.path, baseUrl);
  const body = request.body === undefined ? undefined : Buffer.from(request.body, 'utf8');
  const headers = Object.entries(request.headers ?? {});
  const raw = headers.flat();
  const has = (name: string): boolean => headers.some(([n]) => n.toLowerCase() === name);
  if (!has('host')) raw.push('Host', url.host);
  const hasBodyMethod = !['GET', 'HEAD', 'OPTIONS', 'DELETE'].includes(request.method);
  if (!has('content-length') && (body !== undefined || hasBodyMethod))
    raw.push('Content-Length', String(body?.length ?? 0));
  return new Promise((resolve) => {
    const req = http.request(url, { method: request.method, headers: raw, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({
          ok: true,
          status: res.statusCode ?? 0,
          headers: res.headers,
          body: Buffer.concat(chunks),
        }),
      );
      // A body cut short is a failure, not a short body; resolve() keeps only the first outcome.
      res.on('error', (error) =>
        resolve({ ok: false, error: `response broke off: ${error.message}` }),
      );
      res.on('close', () => {
        if (!res.complete) resolve({ ok: false, error: 'response broke off before its end' });
      });
    });
    req.setTimeout(REQUEST_IDLE_TIMEOUT_MS, () =>
      req.destroy(new Error(`no response within ${REQUEST_IDLE_TIMEOUT_MS} ms`)),
    );
    req.on('error', (error) => resolve({ ok: false, error: error.message }));
    req.end(body);
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
