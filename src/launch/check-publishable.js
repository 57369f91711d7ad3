#!/usr/bin/env node
// `npm publish` runs this first (prepublishOnly): it refuses while package.json's homepage or
// repository is still the placeholder on the reserved .invalid domain (RFC 2606), which stands in
// until the project has a public address. A published package must not send users to a dead link.
// Plain JavaScript, not part of the package.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { URL } = require('node:url');

/** Why the manifest at `file` must not be published, or undefined when it may be. */
function unpublishableReason(file) {
  const pkg = JSON.parse(fs.readFileSync(file, 'utf8'));
  const repository = typeof pkg.repository === 'string' ? pkg.repository : pkg.repository?.url;
  const placeholders = Object.entries({ homepage: pkg.homepage, 'repository.url': repository })
    .filter(
      ([, url]) =>
        url === undefined || new URL(url.replace(/^git\+/, '')).hostname.endsWith('.invalid'),
    )
    .map(([field]) => field);
  if (placeholders.length === 0) return undefined;
  return `${path.relative(process.cwd(), file) || file}: ${placeholders.join(' and ')} still name the placeholder (or nothing): set them to the project's public site and repository before publishing`;
}

module.exports = { unpublishableReason };
if (require.main === module) {
  const reason = unpublishableReason(path.resolve(process.argv[2] ?? 'package.json'));
  if (reason !== undefined) {
    process.stderr.write(`idempotency-proxy: ${reason}\n`);
    process.exit(1);
  }
}
