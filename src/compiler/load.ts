// Reads the YAML config and reports every problem with file, YAML path, line and column. Pipeline:
// YAML (kept as a document, so every node has a source range) → plain values with ${VAR}
// interpolated → zod (../config/schema.ts) → cross-field checks and compilation (compile.ts). All issues of
// one stage are reported together; a stage that fails stops the later ones, since their input would
// be guesswork (a YAML syntax error makes every later location unreliable).
import fs from 'node:fs';
import path from 'node:path';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseDocument, type YAMLError } from 'yaml';
import type { z } from 'zod';
import { ConfigError, type ConfigIssue } from '../errors';
import { StartupError } from '../startup-error';
import { compileConfig } from './compile';
import { formatPath, type IssuePath, type PathIssue } from '../config/path-issue';
import { maskPassword } from '../db/masked-url';
import { recordEnvSources, variableList } from '../config/env-sources';
import { interpolate } from './interpolate';
import { configSchema } from '../config/schema';
import { knownKeysOf } from '../config/schema-formats';
import type { ProxyConfig } from '../config/types';

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): ProxyConfig {
  return loadConfigSource(file, env).config;
}

/**
 * The file's text with the config it compiles to: a cluster's primary hands its workers the text it
 * checked, so a worker never runs an edit that was not reloaded (or did not load).
 */
export function loadConfigSource(
  file: string,
  env: NodeJS.ProcessEnv = process.env,
): { readonly text: string; readonly config: ProxyConfig } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // Not a problem inside a configuration: there is none to report on, so no "invalid configuration".
    if (code === 'ENOENT')
      throw new StartupError(
        `config file not found: ${path.resolve(file)}; pass --config FILE or set IDEMPOTENCY_PROXY_CONFIG (config/proxy.yaml in a clone is the example to start from)`,
        { exitCode: 2, cause: error },
      );
    throw new StartupError(`cannot read the config file: ${(error as Error).message}`, {
      exitCode: 2,
      cause: error,
    });
  }
  return { text, config: parseConfigText(text, file, env) };
}

export function parseConfigText(
  text: string,
  file: string,
  env: NodeJS.ProcessEnv = process.env,
): ProxyConfig {
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true });
  const position = (offset: number | undefined) => {
    if (offset === undefined) return { line: undefined, column: undefined };
    const { line, col } = lineCounter.linePos(offset);
    return { line, column: col };
  };
  if (doc.errors.length > 0) {
    // After a syntax error the parser reports a cascade of follow-on errors that only confuse;
    // keep the first one (and duplicate keys, which are independent of each other).
    const first = doc.errors.find((error) => error.code !== 'DUPLICATE_KEY');
    const shown = doc.errors.filter((error) => error.code === 'DUPLICATE_KEY' || error === first);
    throw new ConfigError(
      file,
      shown.map((error) => ({
        path: '',
        ...position(error.pos[0]),
        message: yamlMessage(error, text),
      })),
    );
  }

  const source = readDocument(doc, env);
  const locate = (issue: PathIssue) => position(source.offsetOf(issue.path, issue.at ?? 'value'));
  const toConfigIssue = (issue: PathIssue): ConfigIssue => ({
    path: formatPath(issue.path),
    ...locate(issue),
    message: issue.message,
  });
  if (source.value === null || source.value === undefined) {
    const message = 'the config file is empty; expected at least "upstreams" and "routes"';
    const problems = source.issues.length > 0 ? source.issues : [{ path: [], message }];
    throw new ConfigError(file, problems.map(toConfigIssue));
  }

  // Which keys the mapping with an unknown key accepts: known to the schema object that raised the
  // issue, which only this hook sees. Keyed by the input object, the one link that survives into
  // the final issue (paths inside unions are still relative here).
  const knownKeysByInput = new WeakMap<object, readonly string[]>();
  const result = configSchema.safeParse(source.value, {
    reportInput: true,
    error: (issue) => {
      const keys = knownKeysOf(issue.inst);
      const input = issue.input;
      if (issue.code === 'unrecognized_keys' && keys && typeof input === 'object' && input !== null)
        knownKeysByInput.set(input, keys);
      return undefined; // keep the schema's own message
    },
  });
  const zodIssues = result.success ? [] : result.error.issues.flatMap((i) => fromZod(i));
  // An unset ${VAR} already explains why its value is wrong: no second issue at the same path.
  const readPaths = new Set(source.issues.map((issue) => formatPath(issue.path)));
  const issues = [
    ...source.issues,
    ...zodIssues.filter((issue) => issue.at === 'key' || !readPaths.has(formatPath(issue.path))),
  ];
  if (issues.length > 0 || !result.success)
    throw new ConfigError(file, sorted(issues.map(toConfigIssue)));
  const config = compileConfig(result.data, { file, env, locate });
  recordEnvSources(config, source.variables);
  return config;

  function fromZod(issue: z.core.$ZodIssue): PathIssue[] {
    const where = plainPath(issue.path);
    if (issue.code === 'invalid_union') {
      // Report inside the one alternative whose type matched (`idempotency:` given a mapping
      // with a bad ttl), rather than "expected false, true or a mapping".
      const matched = issue.errors.filter(
        (branch) =>
          !branch.some(
            (i) => i.path.length === 0 && ['invalid_type', 'invalid_value'].includes(i.code),
          ),
      );
      if (matched.length === 1)
        return matched[0]!.flatMap((inner) =>
          fromZod({ ...inner, path: [...where, ...inner.path] }),
        );
    }
    if (issue.code === 'unrecognized_keys') {
      const input = issue.input;
      const known = (typeof input === 'object' && input && knownKeysByInput.get(input)) || [];
      return issue.keys.map((key) => ({
        path: [...where, key],
        at: 'key',
        message: unknownKeyMessage(key, known),
      }));
    }
    if (issue.code === 'invalid_key') {
      const message = issue.issues[0]?.message ?? 'invalid key';
      return [{ path: where, at: 'key', message: `${message}, got ${show(issue.input)}` }];
    }
    if (!source.has(where) && issue.code === 'invalid_type') {
      const key = where[where.length - 1];
      return [{ path: where, message: `missing required key "${String(key)}" (${issue.message})` }];
    }
    if (source.fromEnv.has(formatPath(where)))
      return [{ path: where, message: `${issue.message}, ${fromEnvironment(where, issue.input)}` }];
    const echo = isScalarValue(issue.input);
    return [
      { path: where, message: echo ? `${issue.message}, got ${show(issue.input)}` : issue.message },
    ];
  }

  /**
   * `got "abc" from ${PROXY_PORT}`: the variable to fix and what it holds. A setting that holds a
   * secret (a token) is not echoed; a URL is shown with its password masked.
   */
  function fromEnvironment(where: IssuePath, value: unknown): string {
    const from = `from ${variableList(source.variables.get(formatPath(where)) ?? [])}`;
    const name = String(where[where.length - 1] ?? '');
    if (/token|secret|password/i.test(name)) return `${from} (value not shown: it may be a secret)`;
    const shown = name === 'url' && typeof value === 'string' ? maskPassword(value) : value;
    return isScalarValue(shown) ? `got ${show(shown)} ${from}` : from;
  }
}

interface SourceNode {
  readonly keyOffset?: number;
  readonly valueOffset?: number;
}

interface ReadDocument {
  readonly value: unknown;
  /** Problems met while reading: unset or malformed ${VAR} references, an oversized document. */
  readonly issues: readonly PathIssue[];
  readonly fromEnv: ReadonlySet<string>;
  /** Path → the environment variables its value references. */
  readonly variables: ReadonlyMap<string, readonly string[]>;
  has(path: IssuePath): boolean;
  /** Offset of `path`'s key or value; for a path not in the file, its nearest ancestor's key. */
  offsetOf(path: IssuePath, at: 'key' | 'value'): number | undefined;
}

// Aliases may repeat nodes exponentially ("billion laughs"); a config is never this big.
const MAX_NODES = 100_000;

/** Plain values with ${VAR} interpolated, plus where each path sits in the source. */
function readDocument(doc: ReturnType<typeof parseDocument>, env: NodeJS.ProcessEnv): ReadDocument {
  const nodes = new Map<string, SourceNode>();
  const issues: PathIssue[] = [];
  const fromEnv = new Set<string>();
  const variables = new Map<string, readonly string[]>();
  let budget = MAX_NODES;

  const read = (node: unknown, where: IssuePath, keyOffset: number | undefined): unknown => {
    if (isAlias(node)) node = node.resolve(doc);
    const id = formatPath(where);
    const valueOffset = isScalar(node) || isMap(node) || isSeq(node) ? node.range?.[0] : undefined;
    nodes.set(id, { keyOffset, valueOffset });
    if (--budget < 0) throw new RangeError('too many nodes');
    if (isMap(node)) {
      const out: Record<string, unknown> = {};
      for (const pair of node.items) {
        const key = isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
        const offset = isScalar(pair.key) ? pair.key.range?.[0] : undefined;
        // defineProperty: a `__proto__:` key must stay a key, not replace the prototype.
        Object.defineProperty(out, key, {
          value: read(pair.value, [...where, key], offset ?? valueOffset),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    }
    if (isSeq(node)) return node.items.map((item, i) => read(item, [...where, i], undefined));
    if (!isScalar(node)) return null;
    if (typeof node.value !== 'string') return node.value;
    const result = interpolate(node.value, env);
    for (const message of result.problems) issues.push({ path: where, message });
    if (result.fromEnv) fromEnv.add(id);
    if (result.variables.length > 0) variables.set(id, result.variables);
    return result.value;
  };

  let value: unknown;
  try {
    value = read(doc.contents, [], undefined);
  } catch (error) {
    if (!(error instanceof RangeError)) throw error; // ours, or the stack of a deeply nested file
    const message = `the document is too large or too deeply nested (limit: ${MAX_NODES} nodes, aliases expanded)`;
    issues.push({ path: [], message });
  }
  return {
    value,
    issues,
    fromEnv,
    variables,
    has: (where) => nodes.has(formatPath(where)),
    offsetOf(where, at) {
      const exact = nodes.get(formatPath(where));
      if (exact) return at === 'key' ? (exact.keyOffset ?? exact.valueOffset) : exact.valueOffset;
      for (let n = where.length - 1; n >= 0; n--) {
        const parent = nodes.get(formatPath(where.slice(0, n)));
        if (parent) return parent.keyOffset ?? parent.valueOffset;
      }
      return undefined;
    },
  };
}

function yamlMessage(error: YAMLError, source: string): string {
  if (error.code === 'MULTIPLE_DOCS')
    return 'invalid YAML: the file holds more than one document (a second "---"); expected one';
  const first = error.message.split('\n')[0] ?? error.message;
  const message = `invalid YAML: ${first.charAt(0).toLowerCase()}${first.slice(1)}`;
  // `{ port: ${PORT} }`: braces end a plain value inside { } and [ ], a classic trap.
  const lineStart = source.lastIndexOf('\n', error.pos[0] - 1) + 1;
  const lineEnd = source.indexOf('\n', error.pos[0]);
  const line = source.slice(lineStart, lineEnd === -1 ? undefined : lineEnd);
  return line.includes('${') && /[[{]/.test(line)
    ? `${message} (inside { } or [ ], quote a value that uses \${...})`
    : message;
}

function unknownKeyMessage(key: string, known: readonly string[]): string {
  const expected = `expected one of: ${known.join(', ')}`;
  if (key === '<<') return `unknown key "<<" (YAML merge keys are not supported); ${expected}`;
  const ranked = known
    .map((candidate) => ({ candidate, distance: editDistance(key, candidate) }))
    .sort((x, y) => x.distance - y.distance)[0];
  // One slip in a short word, two in a longer one: beyond that a guess misleads more than it helps.
  const limit = key.length <= 4 ? 1 : 2;
  return ranked !== undefined && ranked.distance <= limit
    ? `unknown key "${key}"; did you mean "${ranked.candidate}"?`
    : `unknown key "${key}"; ${expected}`;
}

/** Edit distance ignoring case, a swap of neighbours counting as one edit ("hots" → "host"). */
function editDistance(typed: string, known: string): number {
  const a = typed.toLowerCase();
  const b = known.toLowerCase();
  const d = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

function plainPath(segments: readonly PropertyKey[]): IssuePath {
  return segments.map((segment) => (typeof segment === 'symbol' ? String(segment) : segment));
}

function isScalarValue(value: unknown): boolean {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value);
}

function show(value: unknown): string {
  if (value === null) return 'an empty value';
  if (typeof value !== 'string') return String(value);
  return JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}...` : value);
}

/** File order, so the list reads top to bottom; issues without a line (the whole file) first. */
function sorted(issues: ConfigIssue[]): ConfigIssue[] {
  const key = (issue: ConfigIssue) => (issue.line ?? 0) * 1e6 + (issue.column ?? 0);
  return [...issues].sort((a, b) => key(a) - key(b));
}
