import { writeFileSync } from 'node:fs';
import type { Reporter, SerializedError, TestModule } from 'vitest/node';

// The JSON report names a failed test with its message, but a failed hook (a stack that did not
// start in `beforeAll`), a file that did not load, or an error outside any test only as a failed
// file with no message. This reporter writes one line for each of those beside the JSON report
// (`<report>.failures.txt`), so CI's summary can say what failed without its log.

/** The first line of an error that says what it is: a timeout's stack starts with vitest's placeholder. */
function firstLine(error: SerializedError): string {
  const text = error.stack?.startsWith('Error: STACK_TRACE_ERROR') ? error.message : error.message || error.stack;
  return (text ?? String(error)).split('\n')[0]?.slice(0, 300) ?? '';
}

export default class FailuresReporter implements Reporter {
  constructor(private readonly outputFile: string) {}

  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<SerializedError>): void {
    const lines: string[] = [];
    for (const module of testModules) {
      const file = module.moduleId.replace(/^.*?\/test\//, 'test/');
      for (const error of module.errors()) {
        lines.push(`${file}: ${firstLine(error)}`);
      }
      for (const suite of module.children.allSuites()) {
        for (const error of suite.errors()) {
          lines.push(`${file} > ${suite.fullName}: ${firstLine(error)}`);
        }
      }
    }
    for (const error of unhandledErrors) {
      lines.push(`unhandled error: ${firstLine(error)}`);
    }
    writeFileSync(this.outputFile, lines.map((line) => `${line}\n`).join(''));
  }
}
