// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "subledger",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "subledger", targets: ["subledger"]),
        .library(name: "LedgerCore", targets: ["LedgerCore"]),
        .library(name: "LedgerStore", targets: ["LedgerStore"]),
        .library(name: "LedgerServer", targets: ["LedgerServer"]),
        .library(name: "SubledgerClient", targets: ["SubledgerClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
    ],
    targets: [
        .target(
            name: "LedgerCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto")
            ],
            swiftSettings: optimizedInDebug
        ),
        // What every store's adapter shares: the mapper protocol, paging cursors, outbound HTTP hygiene.
        .target(
            name: "StoreAdapters",
            dependencies: [
                "LedgerCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        // One target per store, everything of that store in it (docs/data-flow.md): verification, payload
        // types, the pure mapper, the store's API client, its intake and background services.
        .target(
            name: "AppleStore",
            dependencies: [
                "StoreAdapters",
                "LedgerCore",
                "LedgerStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            resources: [.copy("Resources/AppleRootCA-G3.cer")]
        ),
        .target(
            name: "GoogleStore",
            dependencies: [
                "StoreAdapters",
                "LedgerCore",
                "LedgerStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "LedgerStore",
            dependencies: [
                "LedgerCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "_ConnectionPoolModule", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: optimizedInDebug
        ),
        .target(
            name: "StripeStore",
            dependencies: [
                "StoreAdapters",
                "LedgerCore",
                "LedgerStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "LedgerWebhooks",
            dependencies: [
                "LedgerCore",
                "LedgerStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "LedgerServer",
            dependencies: [
                "AppleStore",
                "GoogleStore",
                "StripeStore",
                "StoreAdapters",
                "LedgerCore",
                "LedgerStore",
                "LedgerWebhooks",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            resources: [.copy("Resources/openapi.yaml"), .copy("Resources/dashboard")],
            swiftSettings: optimizedInDebug
        ),
        .executableTarget(
            name: "subledger",
            dependencies: [
                "AppleStore",
                "GoogleStore",
                "StripeStore",
                "StoreAdapters",
                "LedgerCore",
                "LedgerStore",
                "LedgerServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Generated from openapi.yaml by tools/generate-client (committed: see that script).
        .target(
            name: "SubledgerClient",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
                .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
            ],
            exclude: ["openapi-generator-config.yaml"]
        ),
        .target(
            name: "LedgerTestSupport",
            dependencies: [
                "LedgerCore", "LedgerStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            path: "Tests/LedgerTestSupport"
        ),
        .testTarget(
            name: "LedgerCoreTests",
            dependencies: ["LedgerCore", "LedgerTestSupport", .product(name: "PropertyBased", package: "swift-property-based")]
        ),
        .testTarget(
            name: "StoreAdaptersTests",
            dependencies: [
                "StoreAdapters", "AppleStore", "GoogleStore", "StripeStore", "LedgerCore", "LedgerTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            resources: [.copy("Resources")]
        ),
        .testTarget(
            name: "LedgerStoreTests",
            dependencies: [
                "LedgerCore", "LedgerStore", "LedgerTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "AppleStoreTests",
            dependencies: [
                "AppleStore", "StoreAdapters", "LedgerCore", "LedgerStore", "LedgerTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
        .testTarget(
            name: "LedgerWebhooksTests",
            dependencies: [
                "LedgerCore", "LedgerStore", "LedgerWebhooks", "LedgerTestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .testTarget(
            name: "SubledgerCLITests",
            dependencies: [
                "subledger", "LedgerServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(
            name: "LedgerServerTests",
            dependencies: [
                "StoreAdapters", "AppleStore", "GoogleStore", "StripeStore", "LedgerCore", "LedgerStore", "LedgerServer",
                "LedgerTestSupport", "SubledgerClient", "subledger",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            resources: [.copy("Resources")]
        ),
    ]
)

/// The fold, the report cells, their encoding and the HTTP edge are optimized in debug builds too: the end-to-end suites of
/// `tools/test` (the hostile load, webhooks, faults) run the debug binary, and unoptimized generic code made a
/// 64-entitlement purchase cost 5 times a release build's, so those suites measured the compiler's -Onone
/// rather than the server's design. The other targets stay debuggable; `-enable-testing` still applies.
var optimizedInDebug: [SwiftSetting] { [.unsafeFlags(["-O"], .when(configuration: .debug))] }
