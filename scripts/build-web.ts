#!/usr/bin/env tsx
// Builds the pages' scripts: web/src/<page>/main.ts -> web/public/js/<page>.js (generated,
// not committed). wrangler runs this before `wrangler dev` and `wrangler deploy` (the
// [build] section of wrangler.toml); `npm run build:web` runs it by hand and prints the
// transferred size of each page.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const publicDir = `${root}web/public`;

/** Each page: its hand-written HTML, the shared stylesheet and its bundle. */
export type Page = { name: string; html: string; out: string; entry: string; files: string[] };

export const PAGES: Page[] = [
  {
    name: 'shopper',
    html: 'index.html',
    out: 'shopper',
    entry: 'web/src/shopper/main.ts',
    files: ['index.html', 'app.css', 'js/shopper.js'],
  },
  { name: 'dashboard', html: 'admin.html', out: 'admin', entry: 'web/src/admin/main.ts', files: ['admin.html', 'app.css', 'js/admin.js'] },
];

/** Bundles every page's script (ES2020 modules, minified) into `outdir` (web/public/js). */
export async function buildWeb({ minify = true, outdir = `${publicDir}/js` }: { minify?: boolean; outdir?: string } = {}): Promise<void> {
  await build({
    absWorkingDir: root,
    entryPoints: Object.fromEntries(PAGES.map((p) => [p.out, p.entry])),
    outdir,
    bundle: true,
    format: 'esm',
    target: ['es2020', 'chrome90', 'firefox90', 'safari14'],
    minify,
    legalComments: 'none',
    logLevel: 'warning',
  });
}

/** Bytes on the wire per page (HTML + CSS + JS), raw and gzipped, from the built files. */
export function pageSizes({
  jsDir = `${publicDir}/js`,
}: {
  jsDir?: string;
} = {}): { page: string; html: string; raw: number; gzip: number }[] {
  return PAGES.map((page) => {
    let raw = 0;
    let gzip = 0;
    for (const file of page.files) {
      const bytes = readFileSync(file.startsWith('js/') ? `${jsDir}/${file.slice(3)}` : `${publicDir}/${file}`);
      raw += bytes.length;
      gzip += gzipSync(bytes, { level: 9 }).length;
    }
    return { page: page.name, html: page.html, raw, gzip };
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const started = Date.now();
  await buildWeb({ minify: !process.argv.includes('--no-minify') });
  const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
  const sizes = pageSizes()
    .map((s) => `${s.html} ${kib(s.gzip)} gzipped (${kib(s.raw)} raw)`)
    .join(', ');
  console.log(`[build-web] built in ${Date.now() - started} ms: ${sizes}`);
}
