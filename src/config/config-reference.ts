// The configuration reference in config/README.md, generated from the zod schema (through its JSON
// Schema, src/config/json-schema.ts): one table per block — setting, type, default, meaning — so a
// field added to schema.ts shows up in the docs by running `npm run docs:config`, and a test fails
// until it does. The prose around the tables stays hand-written: only the text between the two
// markers below is replaced.
import { inputJsonSchema, type Json, type JsonObject } from './json-schema';

export const REFERENCE_BEGIN =
  '<!-- BEGIN config reference: generated from src/config/schema.ts by `npm run docs:config`; edit the schema, not these tables -->';
export const REFERENCE_END = '<!-- END config reference -->';

interface Row {
  readonly setting: string;
  readonly field: JsonObject;
  readonly required: boolean;
  /** The table of this field's own block, when it has one. */
  readonly section?: Section;
}

interface Section {
  /** Every place this block appears (`defaults` and `routes[].idempotency` share one table). */
  readonly paths: string[];
  rows: Row[];
}

const isObject = (value: Json | undefined): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const propertiesOf = (node: JsonObject): JsonObject | undefined =>
  isObject(node.properties) ? node.properties : undefined;

/** The mapping-with-fields inside `node` (itself, or its one object alternative), if any. */
function blockOf(node: JsonObject): JsonObject | undefined {
  if (propertiesOf(node)) return node;
  if (!Array.isArray(node.anyOf)) return undefined;
  const blocks = node.anyOf.filter(
    (alt): alt is JsonObject => isObject(alt) && !!propertiesOf(alt),
  );
  return blocks.length === 1 ? blocks[0] : undefined;
}

/** How a block is reached from its field: `upstreams.<name>`, `routes[]`, or the field itself. */
function containerOf(node: JsonObject): { suffix: string; block: JsonObject } | undefined {
  const direct = blockOf(node);
  if (direct) return { suffix: '', block: direct };
  if (isObject(node.additionalProperties) && blockOf(node.additionalProperties))
    return { suffix: '.<name>', block: blockOf(node.additionalProperties)! };
  if (isObject(node.items) && blockOf(node.items))
    return { suffix: '[]', block: blockOf(node.items)! };
  return undefined;
}

const signature = (block: JsonObject): string => JSON.stringify(block.properties);

function countBlocks(node: Json, counts: Map<string, number>): void {
  if (Array.isArray(node)) return node.forEach((item) => countBlocks(item, counts));
  if (!isObject(node)) return;
  if (propertiesOf(node)) counts.set(signature(node), (counts.get(signature(node)) ?? 0) + 1);
  for (const value of Object.values(node)) countBlocks(value, counts);
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
export function headingSlug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

const escapeText = (text: string): string => text.replace(/\|/g, '\\|').replace(/</g, '\\<');
const code = (text: string): string => `\`${text.replace(/\|/g, '\\|')}\``;

function scalarText(value: Json): string {
  if (typeof value === 'string') return /^[\d[{"'!&*#?|>%@`-]/.test(value) ? `"${value}"` : value;
  return JSON.stringify(value);
}

function defaultText(node: JsonObject, required: boolean): string {
  if (required) return 'required';
  const value = node.default;
  if (value === undefined || (isObject(value) && Object.keys(value).length === 0)) return '—';
  if (value === '') return 'empty';
  if (Array.isArray(value)) return code(`[${value.map(scalarText).join(', ')}]`);
  return code(typeof value === 'string' ? value : JSON.stringify(value));
}

function typeText(node: JsonObject, link?: string): string {
  if (typeof node.title === 'string') return escapeText(node.title);
  if (Array.isArray(node.anyOf)) {
    const labels = node.anyOf.filter(isObject).map((alt) => typeText(alt, link));
    return [...new Set(labels)].join(' or ');
  }
  if ('const' in node) return code(JSON.stringify(node.const));
  if (Array.isArray(node.enum)) return node.enum.map((v) => code(String(v))).join(' \\| ');
  if (propertiesOf(node)) return link ? `[mapping](#${link})` : 'mapping';
  switch (node.type) {
    case 'integer':
    case 'number': {
      const range =
        typeof node.minimum === 'number' && typeof node.maximum === 'number'
          ? ` ${node.minimum}–${node.maximum}`
          : '';
      return `${node.type}${range}`;
    }
    case 'array':
      return `list of ${isObject(node.items) ? typeText(node.items, link) : 'values'}`;
    case 'object':
      if (isObject(node.additionalProperties))
        return `mapping of name → ${typeText(node.additionalProperties, link)}`;
      return 'mapping';
    default:
      return typeof node.type === 'string' ? node.type : 'value';
  }
}

const requiredOf = (block: JsonObject): ReadonlySet<string> =>
  new Set(Array.isArray(block.required) ? block.required.map(String) : []);

class ReferenceBuilder {
  private readonly sections = new Map<string, Section>();
  private readonly counts = new Map<string, number>();

  constructor(private readonly schema: JsonObject) {
    countBlocks(schema, this.counts);
  }

  build(): string {
    const topRows: Row[] = [];
    const top = propertiesOf(this.schema) ?? {};
    const required = requiredOf(this.schema);
    for (const [key, field] of Object.entries(top)) {
      if (!isObject(field)) continue;
      const container = containerOf(field);
      const section = container
        ? this.section(`${key}${container.suffix}`, container.block)
        : undefined;
      topRows.push({ setting: key, field, required: required.has(key), section });
    }
    const parts = [
      '## Top level',
      '',
      ...table(topRows),
      ...[...this.sections.entries()].flatMap(([, section]) => [
        '',
        `## ${sectionHeading(section)}`,
        '',
        ...table(section.rows),
      ]),
    ];
    return parts.join('\n');
  }

  /** Registers (or finds) the section of `block` reached at `path`. */
  private section(path: string, block: JsonObject): Section {
    const sig = signature(block);
    const existing = this.sections.get(sig);
    if (existing) {
      existing.paths.push(path);
      return existing;
    }
    const section: Section = { paths: [path], rows: [] };
    this.sections.set(sig, section);
    section.rows = this.rows(block, path, '', this.counts.get(sig) ?? 1);
    return section;
  }

  private rows(block: JsonObject, at: string, prefix: string, parentCount: number): Row[] {
    const rows: Row[] = [];
    const required = requiredOf(block);
    for (const [key, field] of Object.entries(propertiesOf(block) ?? {})) {
      if (!isObject(field)) continue;
      const setting = `${prefix}${key}`;
      const container = containerOf(field);
      const count = container ? (this.counts.get(signature(container.block)) ?? 1) : 0;
      const row = { setting, field, required: required.has(key) };
      if (container && (container.suffix !== '' || count > parentCount)) {
        // Shared with another block (or a list or mapping of blocks): its own table.
        const path = `${at}.${setting}${container.suffix}`;
        rows.push({ ...row, section: this.section(path, container.block) });
      } else if (container) {
        rows.push(row, ...this.rows(container.block, at, `${setting}.`, count));
      } else {
        rows.push(row);
      }
    }
    return rows;
  }
}

function sectionHeading(section: Section): string {
  return section.paths.map(code).join(', ');
}

function table(rows: readonly Row[]): string[] {
  const cells = (row: Row) => {
    // Anchors are resolved here, once every block knows all the places it appears.
    const link = row.section ? headingSlug(sectionHeading(row.section)) : undefined;
    const meaning = typeof row.field.description === 'string' ? row.field.description : '';
    return [
      code(row.setting),
      typeText(row.field, link),
      defaultText(row.field, row.required),
      escapeText(meaning),
    ];
  };
  return [
    '| setting | type | default | meaning |',
    '| --- | --- | --- | --- |',
    ...rows.map((row) => `| ${cells(row).join(' | ')} |`),
  ];
}

/** The generated part of config/README.md, markers included. */
export function configReference(schema: JsonObject = inputJsonSchema()): string {
  return `${REFERENCE_BEGIN}\n\n${new ReferenceBuilder(schema).build()}\n\n${REFERENCE_END}`;
}

/** `readme` with its generated part replaced by `reference`; throws when the markers are missing. */
export function spliceConfigReference(readme: string, reference = configReference()): string {
  const begin = readme.indexOf(REFERENCE_BEGIN);
  const end = readme.indexOf(REFERENCE_END);
  if (begin < 0 || end < begin)
    throw new Error(`config/README.md has no "${REFERENCE_BEGIN}" … "${REFERENCE_END}" markers`);
  return readme.slice(0, begin) + reference + readme.slice(end + REFERENCE_END.length);
}

/** Config fields without a description (YAML paths), which the reference would show blank. */
export function undocumentedFields(node: Json = inputJsonSchema(), at = ''): string[] {
  if (!isObject(node)) return [];
  const found: string[] = [];
  for (const [key, field] of Object.entries(propertiesOf(node) ?? {})) {
    if (!isObject(field)) continue;
    const path = at ? `${at}.${key}` : key;
    if (typeof field.description !== 'string' || field.description === '') found.push(path);
    const container = containerOf(field);
    if (container) found.push(...undocumentedFields(container.block, `${path}${container.suffix}`));
  }
  return [...new Set(found)];
}
