// Former home of the signed tokens, kept for the tools in scripts/ that bundle it by this path.
// Project code imports workers/edge/signed; the import check refuses this file.
export * from './edge/signed';
