// How one of the project's TypeScript tools is started as a child process: this Node with tsx's
// loader (resolved here, so the child finds it whatever its working directory).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/** The command and arguments that run the TypeScript file `script` with `args`. */
export function tsNode(script: string, ...args: string[]): [command: string, args: string[]] {
  return [process.execPath, ['--import', tsxLoader, script, ...args]];
}
