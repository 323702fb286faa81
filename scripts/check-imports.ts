// The import rule of the source tree (docs/architecture.md), checked over the import graph of
// workers/, durable-objects/, db/ and web/src/; fails (exit 1) naming each violating import as
// file:line. Run with tsx; no dependencies.
//
// Every file belongs to one folder of the house (FOLDERS), and the folders stand in layers,
// from the entry (0) down to the kernel (8). A file may import its own folder and lower layers
// only; only the entry imports workers/http or an object's folder (objects are reached through
// their stubs, durable-objects/routing.ts); folders of one layer import each other only where
// the layer allows it, never both ways. web/src/ takes from the kernel only: types with
// `import type`, values only from kernel modules that import nothing (the page bundles them).

import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

type Folder = { name: string; layer: number; peers: boolean };
type ImportRef = { specifier: string; line: number; typeOnly: boolean };
type SourceFile = { path: string; source: string };
type Violation = { file: string; line: number; message: string };

/** Where a file lives, checked in order (the first prefix that matches), and its layer; `true`: its layer's folders may import each other. */
const FOLDERS: readonly (readonly [string, string, number, boolean])[] = [
  ['workers/index.ts', 'entry', 0, false],
  ['workers/http/', 'http', 1, false],
  ['workers/queue/', 'queue', 2, false],
  ['workers/cron/', 'cron', 2, false],
  ['workers/edge/', 'edge', 3, false],
  ['durable-objects/routing.ts', 'routing', 6, false],
  ['durable-objects/', 'object', 4, false],
  ['workers/mirror/', 'mirror', 5, true],
  ['workers/metrics/', 'metrics', 5, true],
  ['workers/payments/', 'payments', 5, true],
  ['db/', 'db', 7, false],
  ['workers/kernel/', 'kernel', 8, false],
  ['web/src/', 'web', -1, false],
];

/** Generated declarations, not source. */
const GENERATED = ['workers/env.d.ts'];

/**
 * The folder of a file (a path relative to the project root, with `/`), or undefined when the
 * file sits outside every folder of the house.
 */
export function folderOf(path: string): Folder | undefined {
  for (const [prefix, name, layer, peers] of FOLDERS) {
    if (path === prefix || (prefix.endsWith('/') && path.startsWith(prefix))) {
      if (name === 'object') {
        const object = path.slice(prefix.length).split('/')[0] ?? '';
        return { name: `durable-objects/${object}`, layer, peers };
      }
      return { name, layer, peers };
    }
  }
  return undefined;
}

/**
 * The imports and re-exports of a module, with their lines. Comments are blanked first (keeping
 * line breaks) so an example in a comment is not taken for an import.
 */
export function importsOf(source: string): ImportRef[] {
  const code = withoutComments(source);
  const found: ImportRef[] = [];
  const statement = /(^|[;\n])\s*(import|export)(\s+type)?\b([^;'"]*?)\bfrom\s*(['"])([^'"]+)\5/g;
  const bare = /(^|[;\n])\s*import\s*(['"])([^'"]+)\2/g;
  const dynamic = /\bimport\s*\(\s*(['"])([^'"]+)\1\s*\)/g;
  const lineAt = (index: number) => code.slice(0, index).split('\n').length;
  for (const m of code.matchAll(statement)) {
    const start = (m.index ?? 0) + (m[1]?.length ?? 0) + (m[0].slice(m[1]?.length ?? 0).match(/^\s*/)?.[0].length ?? 0);
    found.push({ specifier: m[6] ?? '', line: lineAt(start), typeOnly: m[3] !== undefined });
  }
  for (const m of code.matchAll(bare)) {
    found.push({ specifier: m[3] ?? '', line: lineAt((m.index ?? 0) + (m[1]?.length ?? 0)), typeOnly: false });
  }
  for (const m of code.matchAll(dynamic)) {
    found.push({ specifier: m[2] ?? '', line: lineAt(m.index ?? 0), typeOnly: false });
  }
  return found.sort((a, b) => a.line - b.line);
}

/**
 * The source with every comment blanked (line breaks kept), strings and templates left alone.
 * (A regular expression holding a quote can mislead it past the imports, which come first.)
 */
export function withoutComments(source: string): string {
  let out = '';
  let i = 0;
  while (i < source.length) {
    const c = source[i] ?? '';
    const next = source[i + 1] ?? '';
    if (c === '/' && (next === '/' || next === '*')) {
      const close = next === '/' ? source.indexOf('\n', i) : source.indexOf('*/', i + 2);
      const stop = close < 0 ? source.length : next === '/' ? close : close + 2;
      out += source.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else if (c === "'" || c === '"' || c === '`') {
      let j = i + 1;
      while (j < source.length && source[j] !== c) {
        j += source[j] === '\\' ? 2 : 1;
      }
      out += source.slice(i, j + 1);
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** The project file a relative specifier names (from the importing file `from`), among `known` paths; undefined for a package. */
function resolveSpecifier(from: string, specifier: string, known: Set<string>): string | undefined {
  if (!specifier.startsWith('./') && !specifier.startsWith('../')) {
    return undefined;
  }
  const base = join(dirname(from), specifier).split(sep).join('/');
  for (const candidate of [base, `${base}.ts`, `${base}/index.ts`, base.replace(/\.m?js$/, '.ts')]) {
    if (known.has(candidate)) {
      return candidate;
    }
  }
  return `${base} (not found)`;
}

/**
 * Checks the rule over a set of files (paths relative to the root, with `/`).
 */
export function checkGraph(files: SourceFile[]): Violation[] {
  const known = new Set(files.map((f) => f.path));
  const importsBy = new Map(files.map((f) => [f.path, importsOf(f.source)]));
  const violations: Violation[] = [];
  /** folder -> folder -> first import that makes the edge */
  const edges = new Map<string, Map<string, { file: string; line: number }>>();

  for (const file of files) {
    if (GENERATED.includes(file.path)) {
      continue;
    }
    const from = folderOf(file.path);
    if (!from) {
      violations.push({ file: file.path, line: 1, message: 'is in no folder of the house (see scripts/check-imports.ts)' });
      continue;
    }
    for (const ref of importsBy.get(file.path) ?? []) {
      const target = resolveSpecifier(file.path, ref.specifier, known);
      if (target === undefined) {
        continue;
      }
      const at = { file: file.path, line: ref.line };
      const to = folderOf(target);
      if (!to) {
        violations.push({ ...at, message: `imports ${target}, which is in no folder of the house` });
        continue;
      }
      if (from.name === to.name) {
        continue;
      }
      if (from.name === 'web') {
        violations.push(...webImport(file.path, ref, target, to, importsBy));
        continue;
      }
      const edgeMap = edges.get(from.name) ?? new Map<string, { file: string; line: number }>();
      if (!edgeMap.has(to.name)) {
        edgeMap.set(to.name, at);
      }
      edges.set(from.name, edgeMap);
      if (to.name === 'http' && from.name !== 'entry') {
        violations.push({ ...at, message: `imports ${target}: nothing outside workers/http imports it but the entry` });
      } else if (to.name.startsWith('durable-objects/') && from.name !== 'entry') {
        violations.push({ ...at, message: `imports ${target}: objects are reached through their stubs (durable-objects/routing.ts)` });
      } else if (to.layer < from.layer) {
        violations.push({
          ...at,
          message: `${from.name} (layer ${from.layer}) imports ${to.name} (layer ${to.layer}) above it: ${ref.specifier}`,
        });
      } else if (to.layer === from.layer && !from.peers) {
        violations.push({
          ...at,
          message: `${from.name} imports ${to.name} of its own layer, which this layer does not allow: ${ref.specifier}`,
        });
      }
    }
  }

  // Folder cycles: a folder that imports a folder which (through any others) imports it back.
  const reported = new Set<string>();
  for (const [a, targets] of edges) {
    for (const [b, at] of targets) {
      const back = pathBetween(edges, b, a);
      if (back) {
        const cycle = [a, ...back].join(' -> ');
        const key = [...new Set([a, ...back])].sort().join('|');
        if (!reported.has(key)) {
          reported.add(key);
          violations.push({ ...at, message: `folder cycle: ${cycle}` });
        }
      }
    }
  }
  return violations;
}

/**
 * web/src: the kernel only; types with `import type`, values only from kernel modules that import nothing.
 */
function webImport(file: string, ref: ImportRef, target: string, to: Folder, importsBy: Map<string, ImportRef[]>): Violation[] {
  const at = { file, line: ref.line };
  if (to.name !== 'kernel') {
    return [{ ...at, message: `the pages may import only workers/kernel, not ${target}` }];
  }
  if (!ref.typeOnly && (importsBy.get(target) ?? []).length > 0) {
    return [
      { ...at, message: `the pages may take values only from kernel modules that import nothing; use \`import type\` for ${target}` },
    ];
  }
  return [];
}

/**
 * A path of folders from `from` to `to` along the import edges, or undefined.
 */
function pathBetween(edges: Map<string, Map<string, unknown>>, from: string, to: string): string[] | undefined {
  const cameFrom = new Map<string, string | undefined>([[from, undefined]]);
  const queue = [from];
  while (queue.length > 0) {
    const node = queue.shift() ?? '';
    if (node === to) {
      const path: string[] = [];
      for (let n: string | undefined = node; n !== undefined; n = cameFrom.get(n)) {
        path.unshift(n);
      }
      return path;
    }
    for (const next of edges.get(node)?.keys() ?? []) {
      if (!cameFrom.has(next)) {
        cameFrom.set(next, node);
        queue.push(next);
      }
    }
  }
  return undefined;
}

/**
 * The checked source files of a project root.
 */
export function sourceFiles(root: string): SourceFile[] {
  const files: SourceFile[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) {
        walk(path);
      } else if (/\.(ts|mts|mjs|js)$/.test(name)) {
        files.push({ path: relative(root, path).split(sep).join('/'), source: readFileSync(path, 'utf8') });
      }
    }
  };
  for (const dir of ['workers', 'durable-objects', 'db', 'web/src']) {
    if (existsSync(join(root, dir))) {
      walk(join(root, dir));
    }
  }
  return files;
}

/**
 * Small trees with one mistake each: the check must find every one, or it is not checking.
 * the cases it missed
 */
export function selfTest(): string[] {
  const kernel = { path: 'workers/kernel/log.ts', source: 'export const log = 1;\n' };
  const cases: [string, SourceFile[]][] = [
    [
      'an import of workers/http from outside it',
      [kernel, { path: 'workers/http/app.ts', source: '' }, { path: 'workers/edge/x.ts', source: "import { app } from '../http/app';\n" }],
    ],
    [
      'an object importing edge logic',
      [
        { path: 'workers/edge/sold-out.ts', source: '' },
        { path: 'durable-objects/goods-stock/index.ts', source: "import {\n  markSoldOut,\n} from '../../workers/edge/sold-out';\n" },
      ],
    ],
    [
      'the kernel importing the project',
      [
        { path: 'db/goods.ts', source: '' },
        { path: 'workers/kernel/contract.ts', source: "import type { GoodsRow } from '../../db/goods';\n" },
      ],
    ],
    [
      'edge logic importing an object instead of its stub',
      [
        { path: 'durable-objects/goods-stock/storage.ts', source: '' },
        { path: 'workers/edge/x.ts', source: "import type { Sale } from '../../durable-objects/goods-stock/storage';\n" },
      ],
    ],
    [
      'a library cycle',
      [
        { path: 'workers/mirror/a.ts', source: "import { b } from '../metrics/b';\n" },
        { path: 'workers/metrics/b.ts', source: "import { a } from '../mirror/a';\n" },
      ],
    ],
    [
      'the page taking a value from a kernel module with imports',
      [
        kernel,
        { path: 'workers/kernel/contract.ts', source: "import { z } from 'zod';\nimport { log } from './log';\n" },
        { path: 'web/src/shared/contract.ts', source: "import { GoodsId } from '../../../workers/kernel/contract';\n" },
      ],
    ],
    ['a file outside every folder', [{ path: 'workers/stray.ts', source: '' }]],
  ];
  const clean = [
    kernel,
    { path: 'workers/edge/a.ts', source: "// import { app } from '../http/app';\nimport type { log } from '../kernel/log';\n" },
  ];
  const missed = cases.filter(([, files]) => checkGraph(files).length === 0).map(([name]) => name);
  if (checkGraph(clean).length > 0) {
    missed.push('a clean tree (an import in a comment, a type import downwards) was refused');
  }
  return missed;
}

function main() {
  const missed = selfTest();
  if (missed.length > 0) {
    console.error(`check-imports: the check itself is broken; it missed: ${missed.join('; ')}`);
    process.exit(1);
  }
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
  const violations = checkGraph(sourceFiles(root));
  for (const v of violations) {
    console.error(`${v.file}:${v.line}: ${v.message}`);
  }
  if (violations.length > 0) {
    console.error(`check-imports: ${violations.length} import(s) break the rule in docs/architecture.md`);
    process.exit(1);
  }
  console.log('check-imports: the import rule holds');
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main();
}
