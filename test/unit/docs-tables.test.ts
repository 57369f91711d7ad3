// The tables the READMEs promise are kept true by the code they describe (as fastify checks
// Errors.md against lib/errors.js): the error codes and statuses (src/http/README.md), the metrics with
// their types and labels, the request-log fields, outcomes and shadow verdicts
// (docs/metrics-and-logs.md). A code, metric, label or log field added without a row fails here, and so
// does a row for one that is gone.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { ERROR_TABLE } from '../../src/errors';
import { newLogEntry } from '../../src/http/request-log';
import { ProxyMetrics } from '../../src/metrics';
import { PROFILES } from '../../src/profiles';

const ROOT = path.join(__dirname, '../..');
const read = (file: string) => fs.readFileSync(path.join(ROOT, file), 'utf8');

/** The rows (cells, trimmed) of the first table under `## heading` whose first column is `column`. */
function table(file: string, heading: string, column: string): string[][] {
  const text = read(file);
  const start = text.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`${file} has no "${heading}" section`);
  const next = text.slice(start + heading.length + 2).search(/^#{1,2} /m);
  const section = text.slice(start, next < 0 ? undefined : start + heading.length + 2 + next);
  const rows = section
    .split('\n')
    .filter((line) => line.startsWith('|'))
    .map((line) =>
      line
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((cell) => cell.trim()),
    );
  const header = rows.findIndex((cells) => cells[0] === column);
  if (header < 0) throw new Error(`${file} "${heading}" has no table starting with "${column}"`);
  const body = rows.slice(header + 2);
  const end = body.findIndex((cells) => cells[0] === column); // a second table after it
  return end < 0 ? body : body.slice(0, end);
}

/** The `code spans` of a cell, in order. */
const codes = (cell: string | undefined): string[] =>
  [...(cell ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

const sorted = (values: Iterable<string>): string[] => [...new Set(values)].sort();

// The log entry's shape is a TypeScript interface: read it from the source, so a field added to
// the type (and not yet to newLogEntry) still counts.
const LOG_SOURCE = ts.createSourceFile(
  'request-log.ts',
  read('src/http/request-log.ts'),
  ts.ScriptTarget.ES2022,
  true,
);

function declaration<T extends ts.Node>(test: (node: ts.Node) => node is T, name: string): T {
  const found = LOG_SOURCE.statements.find(
    (node) => test(node) && (node as unknown as { name: ts.Identifier }).name.text === name,
  );
  if (!found) throw new Error(`src/http/request-log.ts declares no ${name}`);
  return found as unknown as T;
}

function stringLiterals(type: ts.TypeNode | undefined): string[] {
  if (!type || !ts.isUnionTypeNode(type)) return [];
  return type.types.flatMap((member) =>
    ts.isLiteralTypeNode(member) && ts.isStringLiteral(member.literal) ? [member.literal.text] : [],
  );
}

const entryType = declaration(ts.isInterfaceDeclaration, 'RequestLogEntry');
const entryFields = entryType.members.flatMap((member) =>
  ts.isPropertySignature(member) && ts.isIdentifier(member.name)
    ? [{ name: member.name.text, type: member.type }]
    : [],
);

describe('src/http/README.md error table', () => {
  const rows = table('src/http/README.md', '## Errors', 'code');

  it('lists every code in src/errors.ts, and no other', () => {
    expect(sorted(rows.map((cells) => codes(cells[0])[0]!))).toEqual(
      sorted(Object.keys(ERROR_TABLE)),
    );
  });

  it('gives each code the status src/errors.ts answers with', () => {
    const documented = Object.fromEntries(
      rows.map((cells) => [codes(cells[0])[0], Number(/\d{3}/.exec(cells[1] ?? '')?.[0])]),
    );
    const actual = Object.fromEntries(
      Object.entries(ERROR_TABLE).map(([code, { status }]) => [code, status]),
    );
    expect(documented).toEqual(actual);
  });

  it('says what the client should do about each', () => {
    for (const cells of rows)
      expect({ code: cells[0], todo: cells[3] }).toMatchObject({
        todo: expect.stringMatching(/\w/),
      });
  });
});

describe('docs/metrics-and-logs.md metrics table', () => {
  const PREFIX = 'idempotency_proxy_';
  const rows = table('docs/metrics-and-logs.md', '## Metrics', 'metric');
  const patterns = rows
    .flatMap((cells) => codes(cells[0]))
    .filter((name) => name.endsWith('*'))
    .map((name) => name.slice(0, -1));
  const named = rows.filter((cells) => !codes(cells[0]).some((name) => name.endsWith('*')));

  async function registered() {
    const { registry } = new ProxyMetrics();
    return (await registry.getMetricsAsJSON()).map(({ name, type }) => {
      const metric = registry.getSingleMetric(name) as unknown as { labelNames?: string[] };
      return {
        name: name.slice(PREFIX.length),
        type: String(type),
        labels: sorted(metric.labelNames ?? []),
      };
    });
  }

  it('lists every metric ProxyMetrics registers (prom-client defaults as process_*, nodejs_*)', async () => {
    const names = (await registered()).map((m) => m.name);
    const undocumented = names.filter(
      (name) =>
        !named.some((cells) => codes(cells[0]).includes(name)) &&
        !patterns.some((prefix) => name.startsWith(prefix)),
    );
    expect(undocumented).toEqual([]);
    for (const prefix of patterns)
      expect({ prefix, matches: names.some((name) => name.startsWith(prefix)) }).toEqual({
        prefix,
        matches: true,
      });
  });

  it('gives each metric the type and labels it is registered with', async () => {
    const documented = named.map((cells) => ({
      name: codes(cells[0])[0]!,
      type: cells[1] ?? '',
      labels: sorted(codes(cells[2])),
    }));
    const actual = await registered();
    expect(documented).toEqual(
      documented.map(
        ({ name }) => actual.find((m) => m.name === name) ?? { name, type: 'not registered' },
      ),
    );
  });
});

describe('docs/metrics-and-logs.md log fields', () => {
  const rows = table('docs/metrics-and-logs.md', '## Logs', 'field');
  const cellOf = (field: string) => rows.find((cells) => codes(cells[0]).includes(field))?.[1];

  it('lists every field of a request log line (RequestLogEntry), and no other', () => {
    const fields = [...entryFields.map((f) => f.name), ...Object.keys(newLogEntry('GET', '/'))];
    expect(sorted(rows.flatMap((cells) => codes(cells[0])))).toEqual(sorted(fields));
  });

  it('lists every outcome', () => {
    const outcomes = stringLiterals(declaration(ts.isTypeAliasDeclaration, 'OutcomeLabel').type);
    expect(outcomes.length).toBeGreaterThan(5);
    expect(sorted(codes(cellOf('outcome')))).toEqual(sorted(outcomes));
  });

  it('lists every shadow verdict in the shadow-mode table', () => {
    const verdicts = stringLiterals(entryFields.find((f) => f.name === 'shadow')?.type);
    expect(verdicts.length).toBeGreaterThan(5);
    const documented = table(
      'docs/operations.md',
      '## Shadow mode',
      'enforcing, the proxy would have …',
    );
    expect(sorted(documented.flatMap((cells) => codes(cells[1])))).toEqual(sorted(verdicts));
  });
});

describe('docs/protocol-profiles.md: one table per profile', () => {
  const headings = {
    acp: '## ACP: Agentic Commerce Protocol',
    ucp: '## UCP: Universal Commerce Protocol',
  };
  for (const profile of Object.values(PROFILES)) {
    it(`${profile.name}: states every rule of src/profiles/${profile.name}.ts, line by line`, () => {
      const rows = table('docs/protocol-profiles.md', headings[profile.name], 'rule');
      expect(rows).toEqual(profile.rules.map((r) => [r.rule, r.proxy, r.source]));
    });
  }
});
