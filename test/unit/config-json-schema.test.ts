// The JSON Schema shipped for editors: the committed file must be what the generator prints, and
// real configs (checked before interpolation, as an editor sees them) must validate against it.
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { configJsonSchema } from '../../src/config/json-schema';

const ROOT = path.join(__dirname, '../..');
const read = (file: string) => fs.readFileSync(path.join(ROOT, file), 'utf8');

type Schema = { readonly [keyword: string]: unknown };

// Just the draft-07 keywords the generated schema uses (checked below, so a new keyword fails
// loudly instead of being ignored); no validator dependency for one test.
const KEYWORDS = new Set([
  '$schema',
  'title',
  'description',
  'default',
  'type',
  'properties',
  'additionalProperties',
  'required',
  'items',
  'anyOf',
  'enum',
  'const',
  'pattern',
  'minimum',
  'maximum',
  'minItems',
  'maxLength',
  'propertyNames',
]);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function hasType(type: unknown, value: unknown): boolean {
  switch (type) {
    case 'object':
      return isPlainObject(value);
    case 'array':
      return Array.isArray(value);
    case 'integer':
      return Number.isInteger(value);
    case 'null':
      return value === null;
    default:
      return typeof value === type;
  }
}

/** Problems of `value` against `schema`, as "path: what" lines; empty when valid. */
function validate(schema: Schema, value: unknown, at = '$'): string[] {
  const unknown = Object.keys(schema).filter((keyword) => !KEYWORDS.has(keyword));
  if (unknown.length > 0) throw new Error(`validator does not implement ${unknown.join(', ')}`);
  const errors: string[] = [];
  if (
    Array.isArray(schema.anyOf) &&
    !schema.anyOf.some((s: Schema) => validate(s, value, at).length === 0)
  )
    errors.push(`${at}: matches no alternative`);
  if ('const' in schema && value !== schema.const)
    errors.push(`${at}: expected ${String(schema.const)}`);
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) errors.push(`${at}: not in enum`);
  if (schema.type !== undefined && !hasType(schema.type, value))
    return [...errors, `${at}: expected ${String(schema.type)}`];
  if (typeof value === 'string') {
    if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern).test(value))
      errors.push(`${at}: does not match ${schema.pattern}`);
    if (typeof schema.maxLength === 'number' && value.length > schema.maxLength)
      errors.push(`${at}: too long`);
  }
  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum)
      errors.push(`${at}: too small`);
    if (typeof schema.maximum === 'number' && value > schema.maximum) errors.push(`${at}: too big`);
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems)
      errors.push(`${at}: too few items`);
    if (isPlainObject(schema.items))
      value.forEach((item, i) =>
        errors.push(...validate(schema.items as Schema, item, `${at}[${i}]`)),
      );
  }
  if (isPlainObject(value)) {
    const properties = isPlainObject(schema.properties) ? schema.properties : {};
    for (const key of Array.isArray(schema.required) ? schema.required : [])
      if (!(key in value)) errors.push(`${at}: missing ${String(key)}`);
    for (const [key, field] of Object.entries(value)) {
      if (isPlainObject(schema.propertyNames))
        errors.push(...validate(schema.propertyNames, key, `${at} key ${key}`));
      const own = properties[key];
      if (isPlainObject(own)) errors.push(...validate(own, field, `${at}.${key}`));
      else if (schema.additionalProperties === false) errors.push(`${at}.${key}: not allowed`);
      else if (isPlainObject(schema.additionalProperties))
        errors.push(...validate(schema.additionalProperties, field, `${at}.${key}`));
    }
  }
  return errors;
}

const schema = configJsonSchema();

describe('config JSON Schema', () => {
  it('is committed exactly as the generator prints it (run `npm run schema` after a schema change)', () => {
    expect(JSON.parse(read('config/proxy.schema.json'))).toEqual(schema);
  });

  it('is a titled draft-07 schema with help on the main fields', () => {
    expect(schema.$schema).toBe('http://json-schema.org/draft-07/schema#');
    expect(schema.title).toBe('idempotency-proxy configuration');
    const top = schema.properties as Record<string, Schema>;
    expect(Object.keys(top)).toEqual([
      'listen',
      'shutdownGrace',
      'workers',
      'heapTarget',
      'admin',
      'store',
      'upstreams',
      'trustedProxies',
      'auth',
      'defaults',
      'routes',
    ]);
    for (const field of Object.values(top)) expect(field.description).toEqual(expect.any(String));
    const route = (top.routes!.items as { properties: Record<string, Schema> }).properties;
    expect(Object.keys(route)).toEqual([
      'name',
      'match',
      'upstream',
      'stripPrefix',
      'methodOverride',
      'idempotency',
    ]);
    const block = (top.defaults!.properties ?? {}) as Record<string, Schema>;
    expect(block.ttl).toMatchObject({
      description: 'How long a completed record is replayed.',
      default: '24h',
    });
    expect(block.release).toMatchObject({ default: [408, 425, 429, 503] });
  });

  it.each(['config/proxy.yaml', 'test/fixtures/config/spec-example.yaml'])(
    'accepts %s as written',
    (file) => {
      expect(validate(schema, parseYaml(read(file)))).toEqual([]);
    },
  );

  it('accepts ${VAR} references where numbers, booleans and durations are expected', () => {
    const config = {
      listen: { port: '${PORT:-8080}' },
      shutdownGrace: '${GRACE}',
      upstreams: { app: { url: 'http://a.test' } },
      routes: [
        {
          name: 'r',
          match: { path: '/**' },
          upstream: 'app',
          idempotency: { enforce: '${ENFORCE}' },
        },
      ],
    };
    expect(validate(schema, config)).toEqual([]);
  });

  it('flags the mistakes the loader rejects: unknown keys, bad durations, missing routes', () => {
    const config = {
      listen: { port: 'eighty' },
      upstreams: { app: { url: 'http://a.test', timeout: 30 } },
      routes: [{ name: 'r', match: { path: '/**' }, upstream: 'app', idempotency: { ttll: '1h' } }],
    };
    expect(validate(schema, config)).toEqual([
      '$.listen.port: matches no alternative',
      '$.upstreams.app.timeout: matches no alternative',
      '$.routes[0].idempotency: matches no alternative',
    ]);
    expect(validate(schema, { upstreams: {} })).toEqual(['$: missing routes']);
  });
});
