import { parseConfigText } from '../../src/compiler/load';
import { routingWarnings } from '../../src/compiler/routing-warnings';

function warningsFor(routes: string): string[] {
  const config = parseConfigText(
    `upstreams:\n  app: { url: http://127.0.0.1:4000 }\nroutes:\n${routes}`,
    'proxy.yaml',
    {},
  );
  return routingWarnings(config).map((warning) => warning.message);
}

const CATCH_ALL = '  - { name: rest, upstream: app, match: { path: /** } }\n';

describe('routing warnings (src/http/README.md: check warns about writes that reach a pass-through route)', () => {
  test('names the unlisted methods that fall through to a later pass-through route', () => {
    expect(
      warningsFor(
        `  - { name: refunds, upstream: app, match: { method: POST, path: /refunds }, idempotency: true }\n${CATCH_ALL}`,
      ),
    ).toEqual([
      'route "refunds" protects POST /refunds, but PUT, PATCH and DELETE /refunds reach pass-through route "rest" unprotected. If the upstream takes them, list them in match.method (or leave match.method out: every unsafe method is then protected).',
    ]);
  });

  test('says nothing when every unsafe method is protected, or nothing catches the rest', () => {
    expect(
      warningsFor(
        `  - { name: refunds, upstream: app, match: { path: /refunds }, idempotency: true }\n${CATCH_ALL}`,
      ),
    ).toEqual([]);
    expect(
      warningsFor(
        '  - { name: refunds, upstream: app, match: { method: POST, path: /refunds }, idempotency: true }\n',
      ),
    ).toEqual([]);
  });

  test('fills in parameters, prefixes and hosts when it tries the route’s path', () => {
    const messages = warningsFor(
      [
        '  - { name: refund, upstream: app, match: { method: [POST, PUT], path: /orders/:id/refund }, idempotency: true }',
        '  - { name: mail, upstream: app, match: { method: POST, path: /mail/**, host: mail.internal }, idempotency: true }',
        '  - { name: orders, upstream: app, match: { path: /orders/** } }',
        '  - { name: mailer, upstream: app, match: { path: /mail/** } }',
        '',
      ].join('\n'),
    );
    expect(messages).toEqual([
      expect.stringContaining(
        'PATCH and DELETE /orders/:id/refund reach pass-through route "orders"',
      ),
      expect.stringContaining(
        'PUT, PATCH and DELETE /mail/** on host mail.internal reach pass-through route "mailer"',
      ),
    ]);
  });

  test('warns when an earlier pass-through route takes a protected route’s own requests', () => {
    expect(
      warningsFor(
        `${CATCH_ALL}  - { name: refunds, upstream: app, match: { path: /refunds }, idempotency: true }\n`,
      ),
    ).toEqual([
      'route "refunds" never sees POST, PUT, PATCH and DELETE /refunds: pass-through route "rest" comes first and takes them unprotected. Move "refunds" above it.',
    ]);
  });
});
