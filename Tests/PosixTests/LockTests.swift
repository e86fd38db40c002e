import Foundation
import Testing

@testable import Posix

@Suite("Posix: Lock")
struct LockTests {
    /// Two threads add to a counter kept outside the lock's value, each under the lock.
    /// The total shows mutual exclusion; under ThreadSanitizer (`scripts/sanitize thread`)
    /// the same run shows the sanitizer sees the locking: with `Synchronization.Mutex`
    /// in place of `Lock` it reports a race on `counter.value` and the run fails.
    @Test("excludes, and ThreadSanitizer sees it exclude")
    func excludes() async {
        final class Counter: @unchecked Sendable { var value = 0 }
        let counter = Counter()
        let lock = Lock(0)
        let rounds = 50_000
        let threads = (0..<2).map { _ in
            Thread {
                for _ in 0..<rounds {
                    lock.withLock { entries in
                        counter.value += 1
                        entries += 1
                    }
                }
            }
        }
        for thread in threads { thread.start() }
        let deadline = ContinuousClock.now + .seconds(60)
        while threads.contains(where: { !$0.isFinished }) && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
        #expect(threads.allSatisfy { $0.isFinished })
        let (seen, entries) = lock.withLock { entries in (counter.value, entries) }
        #expect(seen == 2 * rounds)
        #expect(entries == 2 * rounds)
    }

    @Test("passes errors and results through")
    func throwsAndReturns() {
        struct Refused: Error {}
        let lock = Lock([1, 2])
        #expect(throws: Refused.self) { try lock.withLock { _ throws(Refused) in throw Refused() } }
        let count = lock.withLock { values -> Int in
            values.append(3)
            return values.count
        }
        #expect(count == 3)
    }
}
