// The client's keys: UUIDv5 against the RFC's and Python's known answers, the step and business key
// derivations pinned (any change would re-run every action an agent retries across an upgrade) in
// test/fixtures/client-key-vectors.json, which the Python client is tested against too, the same
// answers from a separate Node process, and input validation.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import ts from 'typescript';
import {
  DEFAULT_KEY_NAMESPACE,
  NAMESPACE_DNS,
  NAMESPACE_URL,
  businessKey,
  stepKey,
  uuidV5,
} from 'idempotency-proxy-client';

/** The namespace in the seed article's Python example. */
const SEED_NAMESPACE = '6f1c2a0e-3b7d-4c55-9a1e-2d8f0b7c4e11';
/** The known answers both clients are tested against. */
const VECTORS = JSON.parse(
  fs.readFileSync(path.join(__dirname, '../fixtures/client-key-vectors.json'), 'utf8'),
) as KeyVectors;
const UUID_V5 = /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

interface KeyVectors {
  readonly defaultNamespace: string;
  readonly uuidV5: { namespace: string; name: string; key: string }[];
  readonly stepKeys: {
    runId: string;
    step: number;
    tool: string;
    namespace?: string;
    key: string;
  }[];
  readonly businessKeys: { parts: string | (string | number)[]; namespace?: string; key: string }[];
}

describe('uuidV5', () => {
  it.each(VECTORS.uuidV5.map((v) => [v.namespace, v.name, v.key]))(
    'matches the known answer for %s / %j',
    (namespace, name, expected) => {
      expect(uuidV5(namespace, name)).toBe(expected);
    },
  );

  it('hashes a string as its UTF-8 bytes', () => {
    const name = 'héllo wörld ✓ 𝄞';
    expect(uuidV5(NAMESPACE_DNS, Buffer.from(name, 'utf8'))).toBe(uuidV5(NAMESPACE_DNS, name));
  });

  it('accepts an upper-case namespace and always answers in lower case', () => {
    expect(uuidV5(NAMESPACE_DNS.toUpperCase(), 'python.org')).toBe(
      '886313e1-3b8a-5372-9b90-0c9aee199e5d',
    );
  });

  it('sets the version (5) and variant (10xx) bits for any name', () => {
    fc.assert(
      fc.property(fc.string(), fc.uuid(), (name, namespace) => {
        expect(uuidV5(namespace, name)).toMatch(UUID_V5);
      }),
    );
  });

  it('rejects a namespace that is not a UUID', () => {
    expect(() => uuidV5('not-a-uuid', 'x')).toThrow(/namespace must be a UUID/);
    expect(() => uuidV5('6ba7b8109dad11d180b400c04fd430c8', 'x')).toThrow(TypeError);
  });

  it('rejects a name with a lone surrogate instead of hashing it as U+FFFD', () => {
    expect(() => uuidV5(NAMESPACE_DNS, 'a\ud800b')).toThrow(/lone UTF-16 surrogate/);
    expect(() => uuidV5(NAMESPACE_DNS, '\udc00')).toThrow(TypeError);
  });
});

describe('DEFAULT_KEY_NAMESPACE', () => {
  it('is uuid5(NAMESPACE_URL, "urn:idempotency-proxy:client"), as documented', () => {
    expect(DEFAULT_KEY_NAMESPACE).toBe(uuidV5(NAMESPACE_URL, 'urn:idempotency-proxy:client'));
    expect(DEFAULT_KEY_NAMESPACE).toBe('57e1e5e4-793d-520e-84cb-fc284b261f6f');
    expect(VECTORS.defaultNamespace).toBe(DEFAULT_KEY_NAMESPACE);
  });
});

// Pinned, and shared with the Python client's tests (test/fixtures/client-key-vectors.json):
// computed with Python's uuid.uuid5 (see the TSDoc of stepKey/businessKey for the one-liners). If
// one of these changes, every key derived before the change differs from the key derived after it,
// and a retry that spans an upgrade runs its action again.
const STEP_VECTORS: [string, number, string, string | undefined, string][] = VECTORS.stepKeys.map(
  (v) => [v.runId, v.step, v.tool, v.namespace, v.key],
);
const BUSINESS_VECTORS: [string | (string | number)[], string | undefined, string][] =
  VECTORS.businessKeys.map((v) => [v.parts, v.namespace, v.key]);

describe('stepKey', () => {
  it.each(STEP_VECTORS)(
    'derives the pinned key for (%j, %d, %j) under %s',
    (runId, step, tool, namespace, expected) => {
      expect(stepKey({ runId, step, tool }, namespace)).toBe(expected);
    },
  );

  it("equals the seed article's Python idempotency_key() under its namespace", () => {
    // str(uuid.uuid5(uuid.UUID('6f1c2a0e-...'), 'run-7f3a:4:refund_order'))
    expect(stepKey({ runId: 'run-7f3a', step: 4, tool: 'refund_order' }, SEED_NAMESPACE)).toBe(
      '0a48cd46-5b12-5ebc-b8c4-706edd51f027',
    );
  });

  it('is UUIDv5 of "runId:step:tool" and the same on every call', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1 }).filter((s) => !s.includes(':')),
        fc.nat(),
        fc.string({ minLength: 1 }),
        (runId, step, tool) => {
          const key = stepKey({ runId, step, tool });
          expect(key).toBe(uuidV5(DEFAULT_KEY_NAMESPACE, `${runId}:${step}:${tool}`));
          expect(stepKey({ runId, step, tool })).toBe(key);
        },
      ),
    );
  });

  it('gives a different key to another run, step, tool or namespace', () => {
    const base = { runId: 'run-1', step: 3, tool: 'refund_order' };
    const keys = new Set([
      stepKey(base),
      stepKey({ ...base, runId: 'run-2' }),
      stepKey({ ...base, step: 4 }),
      stepKey({ ...base, tool: 'send_email' }),
      stepKey(base, SEED_NAMESPACE),
    ]);
    expect(keys.size).toBe(5);
  });

  it.each([
    [{ runId: '', step: 0, tool: 't' }, /runId must be a non-empty string/],
    [{ runId: 'a:b', step: 0, tool: 't' }, /runId must not contain ":"/],
    [{ runId: 'r', step: -1, tool: 't' }, /step must be an integer ≥ 0, got -1/],
    [{ runId: 'r', step: 1.5, tool: 't' }, /step must be an integer ≥ 0/],
    [{ runId: 'r', step: NaN, tool: 't' }, /step must be an integer ≥ 0/],
    [{ runId: 'r', step: '1', tool: 't' }, /step must be an integer ≥ 0/],
    [{ runId: 'r', step: 0, tool: '' }, /tool must be a non-empty string/],
    [{ runId: 'r', step: 0, tool: undefined }, /tool must be a non-empty string, got undefined/],
    [{ runId: 'r\ud800', step: 0, tool: 't' }, /runId must be well-formed Unicode/],
  ])('rejects %j', (input, message) => {
    expect(() => stepKey(input as never)).toThrow(TypeError);
    expect(() => stepKey(input as never)).toThrow(message);
  });

  it('rejects a namespace that is not a UUID', () => {
    expect(() => stepKey({ runId: 'r', step: 0, tool: 't' }, 'ns')).toThrow(
      /namespace must be a UUID, got "ns"/,
    );
  });
});

describe('businessKey', () => {
  it.each(BUSINESS_VECTORS)(
    'derives the pinned key for %j under %s',
    (parts, namespace, expected) => {
      expect(businessKey(parts, namespace)).toBe(expected);
    },
  );

  it('encodes a list unambiguously: a separator inside a part cannot make two lists collide', () => {
    expect(businessKey(['refund:a', 'b'])).not.toBe(businessKey(['refund', 'a:b']));
    expect(businessKey(['refund', 'order-123'])).not.toBe(businessKey('refund:order-123'));
  });

  it('writes an integer part as its decimal string', () => {
    expect(businessKey(['refund', 42])).toBe(businessKey(['refund', '42']));
  });

  it('differs from the step key of the same action, so a repeat at another step is still caught', () => {
    const atStep4 = stepKey({ runId: 'run-1', step: 4, tool: 'refund_order' });
    const atStep7 = stepKey({ runId: 'run-1', step: 7, tool: 'refund_order' });
    expect(atStep4).not.toBe(atStep7);
    // The business key is the same whichever step asks.
    expect(businessKey(['run-1', 'refund', 'order-123'])).toBe(
      businessKey(['run-1', 'refund', 'order-123']),
    );
  });

  it('takes its own namespace', () => {
    expect(businessKey('x', SEED_NAMESPACE)).toBe(uuidV5(SEED_NAMESPACE, 'x'));
    expect(businessKey('x', SEED_NAMESPACE)).not.toBe(businessKey('x'));
  });

  it.each([
    ['', /parts must be a non-empty string/],
    [[], /non-empty array/],
    [['refund', ''], /parts\[1\] must be a non-empty string/],
    [['refund', 1.5], /parts\[1\] must be a safe integer or a string, got 1.5/],
    [['refund', 2 ** 53], /parts\[1\] must be a safe integer/],
    [['refund', null], /parts\[1\] must be a non-empty string, got null/],
    [['refund', 10n], /parts\[1\] must be a non-empty string, got 10/],
    [['refund', { id: 1 }], /got an object/],
    [42, /non-empty array/],
    [['\udfff'], /well-formed Unicode/],
  ])('rejects %p', (parts, message) => {
    expect(() => businessKey(parts as never)).toThrow(TypeError);
    expect(() => businessKey(parts as never)).toThrow(message);
  });
});

describe('in another process', () => {
  let dir: string;

  beforeAll(() => {
    // No build step in the tests: transpile packages/client/src to CommonJS in a temporary directory, far
    // from node_modules, so the child can load only what the client itself contains.
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'client-keys-'));
    const sourceDir = path.join(__dirname, '../../packages/client/src');
    for (const file of fs.readdirSync(sourceDir).filter((f) => f.endsWith('.ts'))) {
      const source = fs.readFileSync(path.join(sourceDir, file), 'utf8');
      const { outputText } = ts.transpileModule(source, {
        compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
      });
      fs.writeFileSync(path.join(dir, file.replace(/\.ts$/, '.js')), outputText);
    }
  });

  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('derives the same keys, loading nothing outside the client', () => {
    const script = `
      const client = require(${JSON.stringify(path.join(dir, 'index.js'))});
      const steps = ${JSON.stringify(STEP_VECTORS)}.map(([runId, step, tool, ns]) => client.stepKey({ runId, step, tool }, ns ?? undefined));
      const business = ${JSON.stringify(BUSINESS_VECTORS)}.map(([parts, ns]) => client.businessKey(parts, ns ?? undefined));
      const loaded = Object.keys(require.cache).filter((file) => !file.startsWith(${JSON.stringify(dir)}));
      process.stdout.write(JSON.stringify({ steps, business, loaded, exports: Object.keys(client).sort() }));
    `;
    const out = JSON.parse(
      execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }),
    ) as {
      steps: string[];
      business: string[];
      loaded: string[];
      exports: string[];
    };
    expect(out.steps).toEqual(STEP_VECTORS.map((v) => v[4]));
    expect(out.business).toEqual(BUSINESS_VECTORS.map((v) => v[2]));
    expect(out.loaded).toEqual([]);
    expect(out.exports).toEqual(
      expect.arrayContaining(['idempotentFetch', 'stepKey', 'businessKey']),
    );
  });
});
