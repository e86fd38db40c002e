import Glibc

/// A value behind a `pthread_mutex_t`, with `Synchronization.Mutex`'s `withLock`.
///
/// On Linux, `Mutex` locks with futex calls of its own, which ThreadSanitizer does not
/// see: under it every access made under such a lock is reported as a race, real races
/// drown among them, and the sanitizer cannot tell the locks apart. A pthread mutex is
/// what it intercepts, so the code it checks is the code that ships. Uncontended, the two
/// cost about the same.
public final class Lock<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Reached only through ``withLock(_:)``, under the mutex: no two accesses overlap (a
    /// nested `withLock` of the same lock would deadlock before reaching it), so Swift's
    /// run-time exclusivity check — a thread-local lookup on every call — is left out.
    @exclusivity(unchecked) private var value: Value

    public init(_ value: sending Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        self.value = value
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the value, holding the lock.
    public func withLock<Result, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E)
        -> sending Result
    {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
