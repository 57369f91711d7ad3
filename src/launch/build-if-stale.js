#!/usr/bin/env node
// Builds dist/ (and the client workspace package the proxy re-exports) only when a source is newer
// than the last build, or a source was added or removed: `npm start`, the demos, `npm run cli` and
// the launcher in a clone call it, so a start without changes spends no time in tsc (a full build
// takes 10–20 s here, and tsc --incremental still 5–8 s to find nothing changed). The stamp records
// when the last build started and which sources it saw. Plain JavaScript: it runs before any build.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '../..');
const stamp = path.join(root, 'dist', '.build-stamp');

const CLIENT = path.join(root, 'packages', 'client');

/** What a build costs, measured: a full `npm run build` is 15-20 s on 2 cores (tsc is not incremental). */
const BUILD_TAKES = '- about 20 s on 2 cores; later starts skip it until a source changes';

function tsFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return tsFiles(file);
    return entry.name.endsWith('.ts') ? [file] : [];
  });
}

function sources() {
  const client = fs.existsSync(CLIENT) ? tsFiles(path.join(CLIENT, 'src')) : [];
  return [...tsFiles(path.join(root, 'src')), ...client];
}

/** Why dist/ must be built, or undefined when it is up to date. */
function staleReason() {
  if (!fs.existsSync(path.join(root, 'dist', 'main.js'))) return 'dist/ is not built yet';
  if (fs.existsSync(CLIENT) && !fs.existsSync(path.join(CLIENT, 'dist', 'cjs', 'index.js')))
    return 'the client package is not built yet';
  let built;
  try {
    built = { at: fs.statSync(stamp).mtimeMs, files: JSON.parse(fs.readFileSync(stamp, 'utf8')) };
  } catch {
    return 'dist/ was built by another command';
  }
  const files = sources()
    .map((file) => path.relative(root, file))
    .sort();
  if (JSON.stringify(files) !== JSON.stringify(built.files)) return 'sources were added or removed';
  const inputs = [...files, 'tsconfig.json', 'package.json'];
  const newer = inputs.find((file) => fs.statSync(path.join(root, file)).mtimeMs > built.at);
  return newer === undefined ? undefined : `${newer} changed`;
}

/** Builds when needed; true when it built. */
function buildIfStale() {
  const reason = staleReason();
  if (reason === undefined) return false;
  // Said before the wait, with its length: a first start is otherwise ~20 s of silence.
  process.stderr.write(`idempotency-proxy: building dist/ (${reason}) ${BUILD_TAKES}\n`);
  const started = new Date();
  const files = sources()
    .map((file) => path.relative(root, file))
    .sort();
  // The root build script: the client package first (the proxy re-exports it), then the proxy.
  execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit', cwd: root });
  fs.writeFileSync(stamp, `${JSON.stringify(files)}\n`);
  fs.utimesSync(stamp, started, started); // an edit made during the build counts as newer
  return true;
}

module.exports = { buildIfStale };
if (require.main === module) {
  require('./node-version.js').requireSupportedNode();
  try {
    buildIfStale();
  } catch (error) {
    process.exit(typeof error.status === 'number' ? error.status : 1);
  }
}
