import Glibc

/// The calling thread.
public enum CurrentThread {
    /// Names the calling thread for the kernel (`/proc/PID/task/TID/comm`, `top -H`, `ps -L`,
    /// `perf`): a thread otherwise shows the name of the thread that created it (a
    /// Dispatch worker's, for most of the daemon's). The kernel keeps the first 15 bytes.
    ///
    /// The corresponding C function is `prctl(PR_SET_NAME)`.
    public static func setName(_ name: String) {
        _ = name.withCString { system_set_thread_name($0) }
    }
}

/// A thread of the process's own, outside Dispatch's pool: for work that blocks or loops
/// for the life of its owner (an event loop, a sync thread, a watcher).
public enum NamedThread {
    private final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts a detached thread that names itself `name` (``CurrentThread/setName(_:)``)
    /// and runs `body`; whether it could be started.
    ///
    /// The corresponding C function is `pthread_create`.
    @discardableResult
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Start(name: name, body: body))
        var thread = pthread_t()
        let made = pthread_create(
            &thread, nil,
            { argument in
                let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
                CurrentThread.setName(start.name)
                start.body()
                return nil
            }, box.toOpaque())
        guard made == 0 else {
            box.release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}
