/**
 * Ends the jest run with one plain line that CI logs can be read by: "jest: N passed, N failed, N skipped",
 * after the files that took longest (where a run's time goes, for whoever makes it shorter).
 */
const SLOWEST_SHOWN = 15;

class SummaryReporter {
  onRunComplete(_contexts, results) {
    const files = results.testResults
      .map((file) => ({ seconds: (file.perfStats.end - file.perfStats.start) / 1000, name: file.testFilePath.replace(`${process.cwd()}/`, '') }))
      .filter((file) => Number.isFinite(file.seconds))
      .sort((a, b) => b.seconds - a.seconds);
    const total = files.reduce((sum, file) => sum + file.seconds, 0);
    process.stdout.write(`jest: ${files.length} files in ${Math.round(total)} s; the slowest:\n`);
    for (const file of files.slice(0, SLOWEST_SHOWN)) process.stdout.write(`  ${file.seconds.toFixed(1).padStart(6)} s  ${file.name}\n`);
    const line = `jest: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${results.numPendingTests} skipped`;
    process.stdout.write(`${line}\n`);
  }
}
module.exports = SummaryReporter;
