// Former home of the contract, kept for the tools in scripts/ and test/node/ that import it by
// this path. Project code imports workers/kernel/contract; the import check refuses this file.
export * from './kernel/contract';
