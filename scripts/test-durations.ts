#!/usr/bin/env tsx
// Writes test/setup/durations.json, each test file's seconds, from a vitest JSON report of a
// whole `npm test` (`VITEST_JSON=<file> npm test`; CI keeps one as test-results/embedded.json).
// The test run's sequencer (test/setup/sequencer.ts) starts the longest files first from it on
// a checkout that has not run the tests yet. Usage: tsx scripts/test-durations.ts <report.json>
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

type Report = { testResults: { name: string; startTime: number; endTime: number }[] };

const report = process.argv[2];
if (!report) {
  console.error('usage: tsx scripts/test-durations.ts <a vitest JSON report>');
  process.exit(2);
}
const root = fileURLToPath(new URL('..', import.meta.url));
const { testResults } = JSON.parse(readFileSync(report, 'utf8')) as Report;
const seconds = Object.fromEntries(
  testResults
    .map((file) => [relative(root, file.name), Math.round((file.endTime - file.startTime) / 100) / 10] as const)
    .sort(([a], [b]) => (a < b ? -1 : 1)),
);
writeFileSync(new URL('../test/setup/durations.json', import.meta.url), `${JSON.stringify(seconds, null, 2)}\n`);
console.log(`test/setup/durations.json: ${Object.keys(seconds).length} files`);
