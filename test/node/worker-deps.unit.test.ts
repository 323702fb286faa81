// The Worker tests pre-bundle the packages the Worker imports (vitest.config.ts, WORKER_DEPS): a
// bare import missing from that list loads a second copy of its package beside the bundled one,
// and the Worker tests then fail in ways that do not name the import. This names it.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '../..');
const SOURCES = ['workers', 'db', 'durable-objects', 'test/workers'];

function tsFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    return e.isDirectory() ? tsFiles(path) : e.name.endsWith('.ts') ? [path] : [];
  });
}

/** Package imports (not relative, not the runtime's own modules) of the Worker and its tests. */
function bareImports(): Map<string, string> {
  const found = new Map<string, string>();
  for (const file of SOURCES.flatMap(tsFiles)) {
    for (const m of readFileSync(join(root, file), 'utf8').matchAll(/\bfrom\s+'([^'.][^']*)'/g)) {
      const spec = m[1] ?? '';
      // vitest is the test runner's own, given to every test file by the pool.
      if (!spec.startsWith('cloudflare:') && !spec.startsWith('node:') && spec !== 'vitest' && !found.has(spec)) {
        found.set(spec, file);
      }
    }
  }
  return found;
}

describe('Worker test dependencies', () => {
  it('pre-bundles every package the Worker and its tests import', () => {
    const config = readFileSync(join(root, 'vitest.config.ts'), 'utf8');
    const start = config.indexOf('WORKER_DEPS = [');
    const list = config.slice(start, config.indexOf(']', start));
    const bundled = new Set([...list.matchAll(/'([^']+)'/g)].map((m) => m[1]));
    const missing = [...bareImports()].filter(([spec]) => !bundled.has(spec)).map(([spec, file]) => `${spec} (${file})`);
    expect(missing).toEqual([]);
    expect(bundled.size).toBeGreaterThan(10);
  });
});
