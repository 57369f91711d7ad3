// The `idempotency.reconcile` block (docs/reconcile.md): what it compiles to, and the settings it
// refuses at their file:line (exit 2) — a pointer that is not RFC 6901, `after` shorter than the
// upstream's timeout, reconcile where no unknown outcome is stored, the wrong probe for the route.
import { parseConfigText } from '../../src/compiler/load';
import type { ProxyConfig, ReconcilePolicy } from '../../src/config/types';
import { ConfigError } from '../../src/errors';

function yaml(reconcile: string, idempotency = '', extra = ''): string {
  const block = reconcile
    .split('\n')
    .map((line) => `        ${line}`)
    .join('\n');
  return `upstreams:
  payments: { url: http://127.0.0.1:4000, timeout: 2s }
${extra}routes:
  - name: refunds
    match: { path: /refunds }
    upstream: payments
    idempotency:
${idempotency}      reconcile:
${block}
`;
}

function parse(text: string): ProxyConfig {
  return parseConfigText(text, 'proxy.yaml', { TOKEN: 's3cret' });
}

function policy(text: string): ReconcilePolicy {
  return parse(text).routes[0]!.idempotency!.reconcile!;
}

/** The config errors of `text`, each as "file:line path: message". */
function errors(text: string): string[] {
  try {
    parse(text);
  } catch (error) {
    if (error instanceof ConfigError) return error.message.split('\n');
    throw error;
  }
  throw new Error('expected a ConfigError');
}

const PROBE = 'request: { path: "/refunds?idempotency_key={key}" }';

describe('idempotency.reconcile', () => {
  it('compiles the probe, its rules and its timing, with the documented defaults', () => {
    expect(policy(yaml(PROBE))).toEqual({
      probe: {
        kind: 'request',
        method: 'GET',
        path: '/refunds?idempotency_key={key}',
        headers: null,
      },
      foundStatus: [200],
      exists: null,
      notFoundStatus: [404],
      answerStatus: null,
      answerBody: null,
      afterMs: 5_000,
      everyMs: 30_000,
      giveUpAfterMs: 86_400_000,
    });
    const full = policy(
      yaml(
        [
          'request:',
          '  method: post',
          '  path: "/refunds/lookup?order={body:/order/id}"',
          '  headers: { Authorization: "Bearer ${TOKEN}" }',
          'found: { status: [200, 203], exists: /0 }',
          'notFound: { status: [404, 410] }',
          'answer: { status: 201, body: /0 }',
          'after: 10s',
          'every: 0',
          'giveUpAfter: 2h',
        ].join('\n'),
      ),
    );
    expect(full).toMatchObject({
      probe: { method: 'POST', headers: { authorization: 'Bearer s3cret' } },
      foundStatus: [200, 203],
      exists: ['0'],
      notFoundStatus: [404, 410],
      answerStatus: 201,
      answerBody: ['0'],
      afterMs: 10_000,
      everyMs: 0,
      giveUpAfterMs: 7_200_000,
    });
    expect(
      parse(yaml(PROBE).replace(/ {6}reconcile:[\s\S]*$/, '      ttl: 1h\n')).routes[0]!
        .idempotency!.reconcile,
    ).toBeNull();
  });

  it('refuses pointers that are not RFC 6901, in the rules and in the path template', () => {
    expect(errors(yaml(`${PROBE}\nfound: { exists: "0" }`))).toEqual([
      expect.stringMatching(
        /^proxy\.yaml:\d+:\d+ routes\[0\]\.idempotency\.reconcile\.found\.exists: expected a JSON pointer \(RFC 6901\)/,
      ),
    ]);
    expect(errors(yaml('request: { path: "/refunds?order={body:order}" }'))).toEqual([
      expect.stringMatching(
        /^proxy\.yaml:\d+:\d+ routes\[0\]\.idempotency\.reconcile\.request\.path: \{body:order\}: expected a JSON pointer/,
      ),
    ]);
    expect(errors(yaml('request: { path: "/refunds?k={idempotency_key}" }'))).toEqual([
      expect.stringMatching(
        /reconcile\.request\.path: unknown placeholder \{idempotency_key\}: expected \{key\} or \{body:\/json\/pointer\}/,
      ),
    ]);
  });

  it('refuses `after` shorter than the upstream’s timeout', () => {
    expect(errors(yaml(`${PROBE}\nafter: 1s`))).toEqual([
      expect.stringMatching(
        /^proxy\.yaml:\d+:\d+ routes\[0\]\.idempotency\.reconcile\.after: expected at least the upstream's timeout \(2s\)/,
      ),
    ]);
  });

  it('refuses reconcile where no unknown outcome is stored to reconcile, and in defaults', () => {
    expect(errors(yaml(PROBE, '      unknownOutcome: retry\n'))).toEqual([
      expect.stringMatching(
        /routes\[0\]\.idempotency\.reconcile: reconcile resolves outcomes stored as unknown \(unknownOutcome: fail\)/,
      ),
    ]);
    expect(errors(yaml(PROBE, '      enforce: false\n'))).toEqual([
      expect.stringMatching(/routes\[0\]\.idempotency\.reconcile: a shadow-mode route/),
    ]);
    expect(errors(`${yaml(PROBE)}defaults:\n  reconcile: { ${PROBE} }\n`)).toContainEqual(
      expect.stringMatching(/^proxy\.yaml:\d+:\d+ defaults\.reconcile: a probe asks one upstream/),
    );
  });

  it('asks a REST route with a request and an MCP route with a tool call', () => {
    expect(errors(yaml('tool: { name: find_refund }'))).toEqual([
      expect.stringMatching(
        /reconcile\.tool: reconcile\.tool is for MCP routes: use reconcile\.request/,
      ),
    ]);
    expect(errors(yaml(PROBE, '      mcp: {}\n'))).toEqual([
      expect.stringMatching(
        /reconcile\.request: an MCP route asks with a tool call: use reconcile\.tool/,
      ),
    ]);
    expect(errors(yaml('after: 5s'))).toEqual([
      expect.stringMatching(
        /routes\[0\]\.idempotency\.reconcile: expected reconcile\.request: how to ask the upstream/,
      ),
    ]);
    const tool = policy(
      yaml(
        'tool: { name: find_refund, arguments: { key: "{key}", order: "{arguments:/order}" } }',
        '      mcp: {}\n',
      ).replace('match: { path: /refunds }', 'match: { path: /mcp }'),
    );
    expect(tool.probe).toEqual({
      kind: 'tool',
      name: 'find_refund',
      arguments: { key: '{key}', order: '{arguments:/order}' },
    });
    expect(
      errors(
        yaml(
          'tool: { name: find_refund, arguments: { order: "{body:/order}" } }',
          '      mcp: {}\n',
        ),
      ),
    ).toEqual([
      expect.stringMatching(
        /reconcile\.tool\.arguments\.order: unknown placeholder \{body:\/order\}/,
      ),
    ]);
  });
});
