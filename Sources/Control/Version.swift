/// The version of autosaved and autosavectl, which `--version` prints and
/// `scripts/package` gives the Debian package.
public enum AutosaveVersion {
    public static let current = "0.1.0"
}
