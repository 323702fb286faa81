import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** A test file's seconds in a whole run, by its path from the repository's root (durations.json). */
type Durations = Record<string, number>;

function committedDurations(): Durations {
  try {
    return JSON.parse(readFileSync(new URL('./durations.json', import.meta.url), 'utf8')) as Durations;
  } catch {
    return {};
  }
}

/**
 * vitest's order with the longest files first on a fresh clone too. vitest starts a project's
 * files longest first by how long they took in this checkout's last run; where it has no such
 * run (a fresh clone, so every CI run) it goes by file size, which started long files late and
 * left the cores idle at the end (`npm test` 501 s on a fresh clone against 431 s in a checkout
 * that had run it). Here a file this checkout has not timed takes its seconds from
 * durations.json (`tsx scripts/test-durations.ts <a vitest JSON report>` writes it); the rest
 * is vitest's: groups in their order, projects one after another by name, failed files first.
 */
export default class LongestFirst extends BaseSequencer {
  private readonly committed = committedDurations();

  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const seconds = (spec: TestSpecification): number => {
      const path = relative(root, spec.moduleId);
      const cached = this.ctx.cache.getFileTestResults(`${spec.project.name}:${path}`);
      return cached ? cached.duration / 1000 : (this.committed[path] ?? 0);
    };
    const failed = (spec: TestSpecification): boolean =>
      this.ctx.cache.getFileTestResults(`${spec.project.name}:${relative(root, spec.moduleId)}`)?.failed === true;
    return [...files].sort((a, b) => {
      const group = a.project.config.sequence.groupOrder - b.project.config.sequence.groupOrder;
      if (group !== 0) {
        return group;
      }
      if (a.project.name !== b.project.name) {
        return a.project.name < b.project.name ? -1 : 1;
      }
      if (a.project.config.isolate !== b.project.config.isolate) {
        return a.project.config.isolate ? -1 : 1;
      }
      if (failed(a) !== failed(b)) {
        return failed(a) ? -1 : 1;
      }
      return seconds(b) - seconds(a);
    });
  }
}
