// Former home of the proof of work, kept for the tools in scripts/ and test/node/ that import it
// by this path. Project code imports workers/kernel/pow; the import check refuses this file.
export * from '../kernel/pow';
