/** Ends the jest run with one plain line that CI logs can be read by: "jest: N passed, N failed, N skipped". */
class SummaryReporter {
  onRunComplete(_contexts, results) {
    const line = `jest: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${results.numPendingTests} skipped`;
    process.stdout.write(`${line}\n`);
  }
}
module.exports = SummaryReporter;
