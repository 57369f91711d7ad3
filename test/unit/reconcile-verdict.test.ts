// What a probe's answer says (src/reconcile/verdict.ts) and how its templates are filled
// (src/reconcile/template.ts, src/mcp/reconcile-probe.ts): pure, table-tested.
import type { ReconcilePolicy } from '../../src/config/types';
import { fillArguments } from '../../src/mcp/reconcile-probe';
import {
  fillTemplate,
  parseTemplate,
  TemplateUnfilled,
  type TemplatePart,
} from '../../src/reconcile/template';
import { verdictOf } from '../../src/reconcile/verdict';

const POLICY: ReconcilePolicy = {
  probe: { kind: 'request', method: 'GET', path: '/r?k={key}', headers: null },
  foundStatus: [200],
  exists: ['0'],
  notFoundStatus: [404],
  answerStatus: 201,
  answerBody: ['0'],
  afterMs: 5_000,
  everyMs: 0,
  giveUpAfterMs: 60_000,
};

const json = (value: unknown) => Buffer.from(JSON.stringify(value));

describe('verdictOf', () => {
  it.each([
    ['a found status with the pointer', 200, json([{ id: 're_1' }]), 'found'],
    ['a found status without the pointer', 200, json([]), 'not-found'],
    ['a not-found status', 404, json({}), 'not-found'],
    ['a status in neither list', 500, json({}), 'inconclusive'],
    ['a found status whose body is not JSON', 200, Buffer.from('<html>'), 'inconclusive'],
  ])('%s → %s', (_what, status, body, kind) => {
    expect(verdictOf(POLICY, { status, contentType: 'application/json', body }).kind).toBe(kind);
  });

  it('answers with answer.status and the part answer.body names, marked reconciled', () => {
    const verdict = verdictOf(POLICY, {
      status: 200,
      contentType: 'application/json; charset=utf-8',
      body: json([{ id: 're_1', amount: 5 }]),
    });
    expect(verdict).toEqual({
      kind: 'found',
      response: {
        status: 201,
        headers: [
          ['content-type', 'application/json'],
          ['idempotency-outcome', 'reconciled'],
        ],
        body: json({ id: 're_1', amount: 5 }),
        bodyOmitted: false,
        outcomeUnknown: false,
      },
    });
  });

  it('without answer rules keeps the probe’s status, body and content type', () => {
    const plain = { ...POLICY, exists: null, answerStatus: null, answerBody: null };
    const verdict = verdictOf(plain, {
      status: 200,
      contentType: 'text/plain',
      body: Buffer.from('ok'),
    });
    expect(verdict).toMatchObject({
      kind: 'found',
      response: {
        status: 200,
        body: Buffer.from('ok'),
        headers: [
          ['content-type', 'text/plain'],
          ['idempotency-outcome', 'reconciled'],
        ],
      },
    });
  });
});

describe('templates', () => {
  const parts = parseTemplate(
    '/r?k={key}&o={body:/order/id}&n={body:/n}',
    'body',
  ) as TemplatePart[];

  it('fills the key and values of the original body, percent-encoded in a path', () => {
    expect(
      fillTemplate(parts, 'k 1', { order: { id: 'a/b' }, n: 3 }, 'body', encodeURIComponent),
    ).toBe('/r?k=k%201&o=a%2Fb&n=3');
  });

  it('refuses to fill what the body lacks, a non-scalar, or a body that is not JSON', () => {
    expect(() => fillTemplate(parts, 'k', { n: 3 }, 'body')).toThrow(TemplateUnfilled);
    expect(() => fillTemplate(parts, 'k', { order: { id: {} }, n: 1 }, 'body')).toThrow(
      /not a string, number or boolean/,
    );
    expect(() => fillTemplate(parts, 'k', undefined, 'body')).toThrow(/not JSON/);
  });

  it('keeps a whole-placeholder tool argument as its value, and fills strings inside others', () => {
    expect(
      fillArguments(
        { order: '{arguments:/order}', ref: 'key:{key}', list: ['{arguments:/n}'] },
        'k1',
        {
          order: 42,
          n: true,
        },
      ),
    ).toEqual({ order: 42, ref: 'key:k1', list: [true] });
  });
});
