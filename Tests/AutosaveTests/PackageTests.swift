import Autosave
import Control
import Foundation
@preconcurrency import Glibc
import Posix
import TestSupport
import Testing

/// The Debian package from `scripts/package`: judged by lintian, then installed with
/// `dpkg -i` into a systemd-nspawn container booted from the host's tree (with /usr,
/// /var and /etc overlaid so that dpkg can write, and without the Swift toolchain),
/// started, used, and removed.
@Suite("The Debian package", .serialized)
struct PackageTests {
    static var available: Bool {
        Machine.isRoot && Machine.has("git") && Machine.has("dpkg-deb") && Machine.has("systemd-nspawn")
            && Machine.has("nsenter")
            && FileManager.default.fileExists(atPath: "/lib/systemd/systemd")
    }

    @Test(
        "scripts/package builds a .deb lintian finds no error or warning in; dpkg -i under systemd, start, an edit saved, dpkg -r stops it and keeps the documents",
        .enabled(if: available, "needs root, git, dpkg-deb, systemd-nspawn and nsenter"),
        .timeLimit(.minutes(10)))
    func installAndRemove() async throws {
        let directory = TemporaryDirectory("package")
        let out = directory.sub("out")
        // In a clean clone (the build directory of this checkout is locked by the test run itself).
        let built = try Shell.execute(CleanClone.path + "/scripts/package", [out])
        try #require(built.status == 0, "\(built)")
        let deb = built.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(PathName.lastComponent(deb) == "autosaved_\(AutosaveVersion.current)_amd64.deb")
        #expect(FileManager.default.fileExists(atPath: deb))

        let fields = try Machine.run("dpkg-deb", ["--field", deb, "Package", "Version", "Depends"]).stdout
        #expect(fields.contains("Version: \(AutosaveVersion.current)\n"))
        #expect(fields.contains("libsystemd0"))
        #expect(fields.contains("liburing2"), "the event loop's batched reads and sends: \(fields)")
        let contents = try Machine.run("dpkg-deb", ["--contents", deb]).stdout
        for path in [
            "./usr/sbin/autosaved", "./usr/bin/autosavectl", "./lib/systemd/system/autosaved.service",
            "./lib/systemd/system/autosaved.socket", "./usr/lib/sysusers.d/autosaved.conf",
            "./usr/lib/tmpfiles.d/autosaved.conf", "./etc/autosaved/autosaved.conf",
            "./usr/share/man/man1/autosavectl.1.gz", "./usr/share/man/man5/autosaved.conf.5.gz",
            "./usr/share/man/man8/autosaved.8.gz", "./usr/share/bash-completion/completions/autosavectl",
            "./usr/share/zsh/vendor-completions/_autosavectl", "./usr/share/fish/vendor_completions.d/autosavectl.fish",
            "./usr/lib/systemd/catalog/autosaved.catalog", "./usr/share/doc/autosaved/README.md",
            "./usr/share/doc/autosaved/copyright", "./usr/share/doc/autosaved/changelog.gz",
        ] {
            #expect(contents.contains(" \(path)\n"), "\(path) is not in the package")
        }
        #expect(try Machine.run("dpkg-deb", ["--info", deb, "conffiles"]).stdout == "/etc/autosaved/autosaved.conf\n")

        if Machine.has("lintian") {
            let lintian = try Machine.run("lintian", ["--tag-display-limit", "0", deb])
            let tags = lintian.stdout.split(separator: "\n").filter { $0.hasPrefix("E:") || $0.hasPrefix("W:") }
            #expect(tags.isEmpty, "\(lintian.stdout)")
        } else {
            Issue.record("lintian is not installed (scripts/bootstrap --tests installs it)")
        }

        // The host's tree, with writable layers over /usr, /var and /etc that go away with
        // the test, and no Swift toolchain: the package must bring what it needs.
        for layer in ["usr", "var", "etc"] {
            try FileManager.default.createDirectory(
                atPath: directory.sub("layers/\(layer)"), withIntermediateDirectories: true)
        }
        let container = try await NspawnContainer(
            namePrefix: "autosaved-pkg-",
            [
                "--overlay=/usr:\(directory.sub("layers/usr")):/usr",
                "--overlay=/var:\(directory.sub("layers/var")):/var",
                "--overlay=/etc:\(directory.sub("layers/etc")):/etc", "--tmpfs=/opt/swift",
                "--bind-ro=\(out):/mnt/package",
            ])
        #expect(try container.inside("test", "-e", "/opt/swift/usr/bin/swift").status != 0, "the toolchain is hidden")
        // An image-building policy of this host's tree (policy-rc.d saying 101) would keep
        // deb-systemd-invoke from starting and stopping services, as no Debian host does.
        _ = try container.inside("rm", "-f", "/usr/sbin/policy-rc.d")

        let install = try container.inside("dpkg", "-i", "/mnt/package/" + PathName.lastComponent(deb))
        #expect(install.status == 0, "\(install)")
        #expect(try container.inside("getent", "passwd", "autosaved").status == 0, "postinst made the user")
        #expect(try container.inside("systemctl", "start", "autosaved").status == 0)
        #expect(
            try container.inside("systemctl", "is-active", "autosaved.service", "autosaved.socket").stdout
                == "active\nactive\n")
        #expect(try container.inside("systemctl", "is-enabled", "autosaved.service").stdout == "enabled\n")
        let status = try container.inside("systemctl", "status", "--no-pager", "autosaved").stdout
        #expect(status.contains("/lib/systemd/system/autosaved.service"), "\(status)")
        #expect(status.contains("/usr/sbin/autosaved"), "\(status)")
        #expect(try container.inside("man", "-w", "autosavectl").stdout == "/usr/share/man/man1/autosavectl.1.gz\n")
        let catalog = try container.inside("journalctl", "--list-catalog").stdout
        #expect(catalog.contains("\(MessageID.saveFailed) autosaved:"), "postinst updated the catalog")

        #expect(try container.inside("autosavectl", "--version").stdout == "autosavectl \(AutosaveVersion.current)\n")
        #expect(
            try container.inside("autosavectl", "set", "notes/todo.txt", "--text", "from the package\n").status == 0)
        #expect(try container.inside("autosavectl", "save", "notes/todo.txt", "--wait").status == 0)
        #expect(try container.inside("cat", "/var/lib/autosaved/notes/todo.txt").stdout == "from the package\n")

        // Removal stops the daemon, which first saves an edit that was not due yet.
        #expect(
            try container.inside("autosavectl", "set", "notes/unsaved.txt", "--text", "saved at dpkg -r\n").status == 0)
        let remove = try container.inside("dpkg", "-r", "autosaved")
        #expect(remove.status == 0, "\(remove)")
        #expect(try container.inside("systemctl", "is-active", "autosaved.service").stdout == "inactive\n")
        #expect(try container.inside("test", "-e", "/usr/sbin/autosaved").status != 0)
        #expect(try container.inside("cat", "/var/lib/autosaved/notes/todo.txt").stdout == "from the package\n")
        #expect(try container.inside("cat", "/var/lib/autosaved/notes/unsaved.txt").stdout == "saved at dpkg -r\n")
        #expect(
            try container.inside("test", "-f", "/etc/autosaved/autosaved.conf").status == 0,
            "a conffile stays until purge")
        let log = try container.inside("journalctl", "-u", "autosaved", "--no-pager", "-o", "cat").stdout
        #expect(log.contains("stopping: saving") && log.contains("stopped: "), "stopped cleanly: \(log)")
        _ = try? container.inside("systemctl", "poweroff")
    }
}
