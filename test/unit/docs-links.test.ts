// Every relative link and #anchor in the project's READMEs resolves: a file that moves, or a heading
// that is renamed, fails here instead of leaving a dead link behind.
import fs from 'node:fs';
import path from 'node:path';
import { headingSlug } from '../../src/config/config-reference';
import { isAbsoluteLink, linkTargets } from '../support/markdown-links';

const ROOT = path.join(__dirname, '../..');
const SKIP = new Set(['node_modules', 'dist', '.git', '.data', 'coverage', 'bench-results']);

function markdownFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return SKIP.has(entry.name) ? [] : markdownFiles(full);
    return entry.name.endsWith('.md') ? [full] : [];
  });
}

/** GitHub's anchors of a file: one per heading, "-1", "-2" … for repeats. */
function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  const text = fs.readFileSync(file, 'utf8').replace(/^```[^\n]*\n[\s\S]*?^```[^\n]*$/gm, '');
  for (const [, heading] of text.matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = headingSlug(heading!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1'));
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

function brokenLinks(file: string): string[] {
  const broken: string[] = [];
  for (const target of linkTargets(fs.readFileSync(file, 'utf8'))) {
    if (isAbsoluteLink(target)) continue; // https:, mailto: …
    const [filePart, anchor] = target.split('#', 2) as [string, string | undefined];
    const resolved = filePart === '' ? file : path.resolve(path.dirname(file), filePart);
    const where = `${path.relative(ROOT, file)}: (${target})`;
    if (!fs.existsSync(resolved)) broken.push(`${where} — no such file`);
    else if (anchor !== undefined && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor))
      broken.push(`${where} — no heading with that anchor in ${path.relative(ROOT, resolved)}`);
  }
  return broken;
}

describe('README links', () => {
  const files = markdownFiles(ROOT);

  it('finds the READMEs beside the code', () => {
    const names = files.map((f) => path.relative(ROOT, f));
    expect(names).toEqual(
      expect.arrayContaining(['README.md', 'config/README.md', 'src/README.md', 'test/README.md']),
    );
  });

  it.each(files.map((f) => [path.relative(ROOT, f), f]))(
    '%s: every relative link and #anchor resolves',
    (_name, file) => {
      expect(brokenLinks(file)).toEqual([]);
    },
  );
});

// The repository is self-contained: its rules are written in it, so nothing may cite a document that
// is not here (a planning file's sections, an issue tracker's numbers, a folder beside the checkout),
// and every repo path a comment names as its reference (`docs/record-lifecycle.md#the-fence`,
// `src/http/README.md`) resolves, anchor included.
const THIRD_PARTY = new Set(['anyonce']); // a conformance suite's own files, kept as they came
const FORBIDDEN: [RegExp, string][] = [
  [new RegExp(['SPEC', '§'].join(' ')), 'a section of a planning document that is not in the repo'],
  [/\bissues? #?\d+\b|\bissue-\d+/i, 'an issue number'],
  [new RegExp(['\\.\\.', 'shared'].join('/')), 'a folder outside the checkout'],
];
const REFERENCE = /(?<![\w./-])((?:docs|src|config|test)\/[\w./-]*\.md|README\.md)(#[\w-]+)?/g;

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory())
      return SKIP.has(entry.name) || THIRD_PARTY.has(entry.name) ? [] : sourceFiles(full);
    return /\.(ts|js|mjs|md|sh|ya?ml)$|^Dockerfile$|^run$/.test(entry.name) ? [full] : [];
  });
}

describe('the repository is self-contained', () => {
  const files = sourceFiles(ROOT).filter((f) => !f.startsWith(path.join(ROOT, 'node_modules')));

  it('reads the code, the docs, the config and CI', () => {
    const names = files.map((f) => path.relative(ROOT, f));
    expect(names).toEqual(
      expect.arrayContaining(['src/app.ts', 'docs/README.md', '.ci/run', 'Dockerfile']),
    );
  });

  it('cites no document that is not in the repository', () => {
    const found: string[] = [];
    for (const file of files) {
      const lines = fs.readFileSync(file, 'utf8').split('\n');
      lines.forEach((line, n) => {
        for (const [pattern, what] of FORBIDDEN)
          if (pattern.test(line)) found.push(`${path.relative(ROOT, file)}:${n + 1}: ${what}`);
      });
    }
    expect(found).toEqual([]);
  });

  it('every repo path a code comment names resolves, with its anchor', () => {
    const broken: string[] = [];
    for (const file of files.filter((f) => !f.endsWith('.md'))) {
      const text = fs.readFileSync(file, 'utf8');
      for (const [, target, anchor] of text.matchAll(REFERENCE)) {
        const resolved = path.join(ROOT, target!);
        const where = `${path.relative(ROOT, file)}: ${target}${anchor ?? ''}`;
        if (!fs.existsSync(resolved)) broken.push(`${where} — no such file`);
        else if (anchor !== undefined && !anchorsOf(resolved).has(anchor.slice(1)))
          broken.push(`${where} — no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });
});
