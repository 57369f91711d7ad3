// The one line an unsupported Node.js gets, before anything else runs: `npm start` (prestart),
// `npm test` (pretest) and the `idempotency-proxy` command call it first. The supported lines are
// package.json's `engines.node`, read at run time so the two never disagree. Plain JavaScript in
// the oldest syntax any Node still found on a server runs (no ?., no ??): an old Node must be able
// to read this file to be told it is too old.
'use strict';
var fs = require('fs');
var path = require('path');

/** `^22.19 || ^24 || ^26` as [{ major: 22, minor: 19, patch: 0 }, …]; only caret ranges are written there. */
function parseRange(range) {
  return range.split('||').map(function (part) {
    var match = /^\s*\^(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$/.exec(part);
    if (!match)
      throw new Error('engines.node: "' + part.trim() + '" is not a ^MAJOR[.MINOR[.PATCH]] range');
    return { major: Number(match[1]), minor: Number(match[2] || 0), patch: Number(match[3] || 0) };
  });
}

/** Whether version `v` ("22.23.5", no "v") is in one of the caret ranges. */
function satisfies(version, range) {
  var parts = version.split('.').map(Number);
  return parseRange(range).some(function (line) {
    if (parts[0] !== line.major) return false;
    if (parts[1] !== line.minor) return parts[1] > line.minor;
    return parts[2] >= line.patch;
  });
}

/** "22.19+, 24 or 26" for a person to read. */
function describe(range) {
  var lines = parseRange(range).map(function (line) {
    if (line.minor === 0 && line.patch === 0) return String(line.major);
    return line.major + '.' + line.minor + (line.patch ? '.' + line.patch : '') + '+';
  });
  if (lines.length === 1) return lines[0];
  return lines.slice(0, -1).join(', ') + ' or ' + lines[lines.length - 1];
}

/** The line to print for `version` under `range`, or undefined when it is supported. */
function unsupportedLine(version, range) {
  if (satisfies(version, range)) return undefined;
  return (
    'idempotency-proxy needs Node.js ' +
    describe(range) +
    ' (the maintained LTS lines); this is ' +
    'Node.js ' +
    version +
    '. Install one of those (from nodejs.org, or `nvm install 26`) and run this again.'
  );
}

function engines() {
  var manifest = path.join(__dirname, '..', '..', 'package.json');
  return JSON.parse(fs.readFileSync(manifest, 'utf8')).engines.node;
}

/** Prints the line and exits 1 on an unsupported Node; returns otherwise. */
function requireSupportedNode() {
  var line = unsupportedLine(process.versions.node, engines());
  if (line === undefined) return;
  process.stderr.write(line + '\n');
  process.exit(1);
}

module.exports = {
  parseRange: parseRange,
  satisfies: satisfies,
  unsupportedLine: unsupportedLine,
  requireSupportedNode: requireSupportedNode,
};

if (require.main === module) requireSupportedNode();
