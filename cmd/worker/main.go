// Command worker runs ferry's job workers and migrates its schema. The app
// lives in package ferrycli, which also builds worker binaries with job
// kinds of their own (ferrycli.WorkerMain; see examples/embedded); see
// `worker --help`.
package main

import "github.com/ferryq/ferry/ferrycli"

func main() { ferrycli.WorkerMain(ferrycli.WorkerOptions{}) }
