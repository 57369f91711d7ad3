// The JSON Schema shipped as config/proxy.schema.json so editors complete and check the YAML. It is
// generated from the zod schema (the input side: what a user writes) and then widened in one way:
// the file is checked BEFORE ${VAR} interpolation, so wherever a number, a boolean or a patterned
// string (a duration, a size, a header name) is expected, a string holding a ${VAR} reference is
// allowed too — otherwise `port: ${PORT:-8080}` would be flagged by every editor.
import { z } from 'zod';
import { configSchema } from './schema';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export const ENV_REFERENCE_PATTERN = String.raw`\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}`;

export function configJsonSchema(): JsonObject {
  const { $schema, ...body } = allowEnvReferences(inputJsonSchema()) as JsonObject;
  return {
    $schema: $schema ?? 'http://json-schema.org/draft-07/schema#',
    title: 'idempotency-proxy configuration',
    description:
      'config/proxy.yaml of idempotency-proxy. Values may use ${VAR} and ${VAR:-default}; durations are like "30s", sizes like "8mb".',
    ...body,
  };
}

/**
 * The schema of what a user writes, after ${VAR} interpolation, with defaults: the shape
 * config/README.md's reference tables are generated from.
 */
export function inputJsonSchema(): JsonObject {
  return z.toJSONSchema(configSchema, {
    io: 'input',
    target: 'draft-7',
    // zod leaves `default` out of the input side of a pipe (our number/boolean coercions), but
    // editors offer defaults in completion, so put them back: zod's own and the built-in ones
    // schema.ts records as metadata on optional idempotency fields.
    override: (ctx) => {
      const fallback =
        ctx.zodSchema instanceof z.ZodDefault
          ? ctx.zodSchema.def.defaultValue
          : z.globalRegistry.get(ctx.zodSchema)?.default;
      if (fallback !== undefined) ctx.jsonSchema.default = fallback;
    },
  }) as JsonObject;
}

function isObject(value: Json): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function allowEnvReferences(node: Json): Json {
  if (Array.isArray(node)) return node.map(allowEnvReferences);
  if (!isObject(node)) return node;
  const walked: JsonObject = {};
  for (const [key, value] of Object.entries(node)) walked[key] = allowEnvReferences(value);
  const scalar =
    walked.type === 'integer' ||
    walked.type === 'number' ||
    walked.type === 'boolean' ||
    (walked.type === 'string' && walked.pattern !== undefined);
  if (!scalar || 'const' in walked || 'enum' in walked) return walked;
  // Help text stays on the outside, where editors look for it.
  const { description, default: fallback, ...rest } = walked;
  const reference: JsonObject = { type: 'string', pattern: ENV_REFERENCE_PATTERN };
  return {
    ...(description === undefined ? {} : { description }),
    ...(fallback === undefined ? {} : { default: fallback }),
    anyOf: [rest, reference],
  };
}
