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
