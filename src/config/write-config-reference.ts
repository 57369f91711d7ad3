// `npm run docs:config`: rewrites the generated tables of config/README.md from the zod schema, in
// place (the prose around them is kept). A unit test fails while the committed file differs.
import fs from 'node:fs';
import path from 'node:path';
import { spliceConfigReference } from './config-reference';

// dist/config/ or src/config/ → the repository's config/README.md
const file = path.resolve(__dirname, '../../config/README.md');
const before = fs.readFileSync(file, 'utf8');
const after = spliceConfigReference(before);
if (after !== before) fs.writeFileSync(file, after);
process.stdout.write(
  `${path.relative(process.cwd(), file)}: ${after === before ? 'unchanged' : 'updated'}\n`,
);
