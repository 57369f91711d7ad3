// The MCP SDK is a devDependency: only the demos (src/demo) may import it. The proxy's own MCP
// routes (src/mcp) speak JSON-RPC themselves, so a production install (npm ci --omit=dev) runs.
import fs from 'node:fs';
import path from 'node:path';

const src = path.resolve(__dirname, '../../src');

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(file);
    return entry.name.endsWith('.ts') ? [file] : [];
  });
}

test('no module outside src/demo imports an MCP SDK', () => {
  const importers = sourceFiles(src)
    .filter((file) => !file.startsWith(path.join(src, 'demo') + path.sep))
    .filter((file) => /from '@modelcontextprotocol\//.test(fs.readFileSync(file, 'utf8')))
    .map((file) => path.relative(src, file));
  expect(importers).toEqual([]);
});

test('the MCP demo does import it, so this test would notice a moved import', () => {
  const server = fs.readFileSync(path.join(src, 'demo', 'mcp-refund-server.ts'), 'utf8');
  expect(server).toMatch(/from '@modelcontextprotocol\/sdk\/server\/mcp\.js'/);
});
