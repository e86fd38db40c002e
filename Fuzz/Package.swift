// swift-tools-version:6.0
import PackageDescription

// libFuzzer targets over the root package's parsers and readers. Built only by
// scripts/fuzz, with `-sanitize=fuzzer,address`: each executable's entry point hands
// control to libFuzzer's driver, so these do not link without the fuzzer runtime.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "autosaved-fuzz",
    dependencies: [.package(name: "autosaved", path: "..")],
    targets: [
        // Input slicing, failure reports and the libFuzzer entry glue shared by the targets.
        .target(name: "FuzzSupport", swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzRequest",
            dependencies: ["FuzzSupport", .product(name: "Control", package: "autosaved")],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzJSON",
            dependencies: ["FuzzSupport", .product(name: "Control", package: "autosaved")],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzMergePatch",
            dependencies: [
                "FuzzSupport", .product(name: "Control", package: "autosaved"),
                .product(name: "Autosave", package: "autosaved"),
            ],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzConfig",
            dependencies: ["FuzzSupport", .product(name: "Autosave", package: "autosaved")],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzIgnore",
            dependencies: ["FuzzSupport", .product(name: "Autosave", package: "autosaved")],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzFileWrapper",
            dependencies: ["FuzzSupport", .product(name: "Documents", package: "autosaved")],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzJournal",
            dependencies: [
                "FuzzSupport", .product(name: "Journal", package: "autosaved"),
                .product(name: "Posix", package: "autosaved"),
            ],
            swiftSettings: strictSettings),
        .executableTarget(
            name: "FuzzSession",
            dependencies: [
                "FuzzSupport", .product(name: "Autosave", package: "autosaved"),
                .product(name: "Control", package: "autosaved"), .product(name: "Documents", package: "autosaved"),
                .product(name: "Logging", package: "autosaved"),
            ],
            swiftSettings: strictSettings),
    ],
    swiftLanguageModes: [.v6]
)
