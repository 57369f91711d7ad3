// Prints the config JSON Schema on stdout: `npm run schema` writes it to config/proxy.schema.json,
// and a unit test checks that the committed file still equals it.
import { configJsonSchema } from './json-schema';

process.stdout.write(`${JSON.stringify(configJsonSchema(), null, 2)}\n`);
