#!/usr/bin/env tsx
// Fails when workers/env.d.ts no longer matches wrangler.toml and
// .dev.vars.example. (`wrangler types --check` ignores --env-file, so it cannot see secrets.)
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const file = `${root}workers/env.d.ts`;
const before = readFileSync(file, 'utf8');
execFileSync(
  process.execPath,
  [
    `${root}node_modules/wrangler/bin/wrangler.js`,
    'types',
    'workers/env.d.ts',
    '--env-file',
    '.dev.vars.example',
    '--include-runtime=false',
  ],
  {
    cwd: root,
    stdio: 'ignore',
  },
);
if (readFileSync(file, 'utf8') !== before) {
  console.error('workers/env.d.ts was out of date and has been regenerated: commit it.');
  process.exit(1);
}
console.log('workers/env.d.ts is up to date');
