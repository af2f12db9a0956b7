import ArgumentParser
import NIOCore
import NIOPosix

// Swift Concurrency's tasks run on NIO's event loops (the threads that already do the HTTP server's and
// PostgreSQL's I/O): a request's task, its queries and its answer no longer hop between Swift's global pool
// and the event loops. The profile of a lone append showed those hops (context switches) as the largest share
// of the server's CPU (BENCHMARKS.md, issue 38). Only possible from the main thread, before any task runs.
NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
/// `AsyncParsableCommand`'s own `main`, which the top level would not choose over `ParsableCommand`'s.
func runAsync<Command: AsyncParsableCommand>(_: Command.Type) async { await Command.main(nil) }
await runAsync(Subledger.self)
