// Reads what `docker build` reads — the Dockerfile's stages and instructions, and .dockerignore — so
// the deploy tests can lint and cross-check them without a Docker engine. Covers the syntax our
// Dockerfile may use: `\` continuations, comments, exec (JSON) and shell forms, `--flag=value`.
import fs from 'node:fs';
import path from 'node:path';

export const REPO_ROOT = path.resolve(__dirname, '../..');

export interface Instruction {
  /** Upper-case: FROM, RUN, COPY, … */
  readonly keyword: string;
  /** Everything after the keyword, continuation lines joined with a space. */
  readonly args: string;
  /** 1-based line where the instruction starts. */
  readonly line: number;
}

export interface Stage {
  readonly index: number;
  /** The `AS name`, lower-case as Docker treats it; undefined for an unnamed stage. */
  readonly name: string | undefined;
  /** FROM's image reference, or the name of an earlier stage. */
  readonly from: string;
  readonly line: number;
  /** The stage's instructions after FROM. */
  readonly instructions: readonly Instruction[];
}

export interface Dockerfile {
  readonly instructions: readonly Instruction[];
  readonly stages: readonly Stage[];
}

export function readDockerfile(file = path.join(REPO_ROOT, 'Dockerfile')): Dockerfile {
  return parseDockerfile(fs.readFileSync(file, 'utf8'));
}

export function parseDockerfile(text: string): Dockerfile {
  const instructions: Instruction[] = [];
  let pending: { parts: string[]; line: number } | undefined;
  text.split(/\r?\n/).forEach((raw, i) => {
    const trimmed = raw.trim();
    // Comment and blank lines end nothing: inside a continuation Docker skips them too.
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const continues = /\\\s*$/.test(raw);
    const content = continues ? raw.replace(/\\\s*$/, '') : raw;
    pending ??= { parts: [], line: i + 1 };
    pending.parts.push(content.trim());
    if (continues) return;
    instructions.push(toInstruction(pending.parts.join(' '), pending.line));
    pending = undefined;
  });
  if (pending) instructions.push(toInstruction(pending.parts.join(' '), pending.line));

  const stages: Stage[] = [];
  let current: { stage: Omit<Stage, 'instructions'>; instructions: Instruction[] } | undefined;
  for (const instruction of instructions) {
    if (instruction.keyword === 'FROM') {
      if (current) stages.push({ ...current.stage, instructions: current.instructions });
      const { rest } = splitFlags(instruction.args); // --platform=…
      const [from = '', as, name] = rest.split(/\s+/);
      current = {
        stage: {
          index: stages.length,
          name: as?.toUpperCase() === 'AS' ? name?.toLowerCase() : undefined,
          from,
          line: instruction.line,
        },
        instructions: [],
      };
    } else {
      current?.instructions.push(instruction);
    }
  }
  if (current) stages.push({ ...current.stage, instructions: current.instructions });
  return { instructions, stages };
}

function toInstruction(text: string, line: number): Instruction {
  const match = /^(\S+)\s*(.*)$/s.exec(text);
  return { keyword: (match?.[1] ?? '').toUpperCase(), args: match?.[2] ?? '', line };
}

/** The exec form's argument list when `args` is a JSON array of strings (as Docker decides), else undefined. */
export function execForm(args: string): string[] | undefined {
  if (!args.trim().startsWith('[')) return undefined;
  try {
    const value: unknown = JSON.parse(args);
    return Array.isArray(value) && value.every((item) => typeof item === 'string')
      ? value
      : undefined;
  } catch {
    return undefined;
  }
}

/** Leading `--name=value` flags, and the text after them. */
export function splitFlags(args: string): { flags: Map<string, string>; rest: string } {
  const flags = new Map<string, string>();
  let rest = args.trim();
  for (let match = /^--([\w-]+)(?:=(\S*))?\s*/.exec(rest); match;) {
    flags.set(match[1]!, match[2] ?? '');
    rest = rest.slice(match[0].length);
    match = /^--([\w-]+)(?:=(\S*))?\s*/.exec(rest);
  }
  return { flags, rest };
}

/** The stage named `name`, or the last stage (what `docker build` without --target produces). */
export function stageNamed(dockerfile: Dockerfile, name?: string): Stage {
  const stage =
    name === undefined
      ? dockerfile.stages[dockerfile.stages.length - 1]
      : dockerfile.stages.find((candidate) => candidate.name === name);
  if (!stage) throw new Error(`the Dockerfile has no stage ${name ?? '(none at all)'}`);
  return stage;
}

/** `stage` and the earlier stages it is built FROM, nearest first: what the image inherits. */
export function lineage(dockerfile: Dockerfile, stage: Stage): Stage[] {
  const chain = [stage];
  for (let parent = earlierStage(dockerfile, stage); parent;) {
    chain.push(parent);
    parent = earlierStage(dockerfile, parent);
  }
  return chain;
}

function earlierStage(dockerfile: Dockerfile, stage: Stage): Stage | undefined {
  return dockerfile.stages.find(
    (candidate) => candidate.index < stage.index && candidate.name === stage.from.toLowerCase(),
  );
}

/** The instructions an image built from `stage` carries, oldest first (its lineage, root first). */
export function inheritedInstructions(dockerfile: Dockerfile, stage: Stage): Instruction[] {
  return lineage(dockerfile, stage)
    .reverse()
    .flatMap((each) => each.instructions);
}

/** Effective value of the last `keyword` instruction in the image (e.g. WORKDIR, USER, CMD). */
export function lastOf(
  dockerfile: Dockerfile,
  stage: Stage,
  keyword: string,
): Instruction | undefined {
  return inheritedInstructions(dockerfile, stage)
    .filter((instruction) => instruction.keyword === keyword)
    .pop();
}

/** Environment set by ENV in the image: `ENV A=1 B=2` and the legacy `ENV A 1`. */
export function imageEnv(dockerfile: Dockerfile, stage: Stage): Record<string, string> {
  const env: Record<string, string> = {};
  for (const instruction of inheritedInstructions(dockerfile, stage)) {
    if (instruction.keyword !== 'ENV') continue;
    const pairs = [...instruction.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)/g)];
    if (pairs.length === 0) {
      const [name = '', ...value] = instruction.args.split(/\s+/);
      env[name] = value.join(' ');
    }
    for (const [, name, value = ''] of pairs) env[name!] = value.replace(/^"(.*)"$/, '$1');
  }
  return env;
}

// ---- .dockerignore -------------------------------------------------------------------------

interface IgnoreRule {
  readonly negate: boolean;
  readonly pattern: RegExp;
}

export function readDockerignore(file = path.join(REPO_ROOT, '.dockerignore')): IgnoreRule[] {
  return fs
    .readFileSync(file, 'utf8')
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const negate = line.startsWith('!');
      const body = path.posix.normalize((negate ? line.slice(1) : line).trim()).replace(/^\/+/, '');
      return { negate, pattern: globToRegExp(body.replace(/\/+$/, '')) };
    });
}

/**
 * Whether the build context leaves out `relativePath`, as Docker decides: the last rule that matches
 * the path or one of its parent folders wins (`*` then `!src` keeps src/ and all below it).
 */
export function isIgnored(rules: readonly IgnoreRule[], relativePath: string): boolean {
  const parts = path.posix.normalize(relativePath).replace(/^\.\//, '').split('/');
  const candidates = parts.map((_, i) => parts.slice(0, i + 1).join('/'));
  let ignored = false;
  for (const rule of rules)
    if (candidates.some((candidate) => rule.pattern.test(candidate))) ignored = !rule.negate;
  return ignored;
}

/** Go filepath.Match plus Docker's `**` (any number of folders, including none). */
function globToRegExp(glob: string): RegExp {
  let source = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*' && glob[i + 1] === '*') {
      const slash = glob[i + 2] === '/';
      source += slash ? '(?:.*/)?' : '.*';
      i += slash ? 2 : 1;
    } else if (c === '*') source += '[^/]*';
    else if (c === '?') source += '[^/]';
    else source += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}
