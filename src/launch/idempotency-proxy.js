#!/usr/bin/env node
// The command npm links as `idempotency-proxy`. In a clone (src/ and typescript present) it builds
// dist/ first when the sources are newer, so `npx idempotency-proxy check` works before any build;
// an installed package runs its dist/ as it is. An unsupported Node.js gets one line first.
'use strict';
require('./node-version.js').requireSupportedNode();
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '../..');
const inClone = fs.existsSync(path.join(root, 'src', 'main.ts'));
if (inClone) {
  try {
    require(path.join(__dirname, 'build-if-stale.js')).buildIfStale();
  } catch (error) {
    process.stderr.write(
      `idempotency-proxy: could not build dist/ (${error.message.split('\n')[0]}): run npm install, then npm run build\n`,
    );
    process.exit(1);
  }
}
require(path.join(root, 'dist', 'main.js'));
