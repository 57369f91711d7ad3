// config/README.md's reference tables are generated from the zod schema: the committed file must be
// what the generator writes now, and every field needs a description to show there.
import fs from 'node:fs';
import path from 'node:path';
import {
  configReference,
  spliceConfigReference,
  undocumentedFields,
} from '../../src/config/config-reference';

const FILE = path.join(__dirname, '../../config/README.md');

describe('config/README.md', () => {
  it('has the reference tables the schema generates now (run `npm run docs:config` after a schema change)', () => {
    const committed = fs.readFileSync(FILE, 'utf8');
    const message = 'config/README.md is out of date: run `npm run docs:config` and commit it';
    expect({ upToDate: spliceConfigReference(committed) === committed, message }).toEqual({
      upToDate: true,
      message,
    });
  });

  it('gives every config field a description (.describe() or opt(…, description) in schema.ts)', () => {
    expect(undocumentedFields()).toEqual([]);
  });
});

describe('configReference', () => {
  const schema = {
    type: 'object',
    properties: {
      port: { type: 'integer', minimum: 0, maximum: 65535, default: 8080, description: 'Port.' },
      block: {
        type: 'object',
        description: 'A block.',
        properties: {
          mode: { type: 'string', enum: ['a', 'b'], default: 'a', description: 'a | b.' },
          inner: {
            type: 'object',
            description: 'Nested.',
            properties: { ttl: { type: 'string', title: 'duration', description: 'Life <x>.' } },
          },
        },
        required: ['mode'],
      },
    },
  } as const;

  it('puts every field of a new block in a table, nested fields as dotted rows', () => {
    const text = configReference(JSON.parse(JSON.stringify(schema)));
    expect(text).toContain('| `port` | integer 0–65535 | `8080` | Port. |');
    expect(text).toContain('| `block` | [mapping](#block) | — | A block. |');
    expect(text).toContain('## `block`');
    expect(text).toContain('| `mode` | `a` \\| `b` | required | a \\| b. |');
    expect(text).toContain('| `inner.ttl` | duration | — | Life \\<x>. |');
  });

  it('refuses a README without the markers instead of dropping its prose', () => {
    expect(() => spliceConfigReference('# Configuration\n')).toThrow(/markers/);
  });
});
