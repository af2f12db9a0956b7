// swift-tools-version:6.0
import PackageDescription
let package = Package(
    name: "csvbench",
    dependencies: [
        .package(url: "https://github.com/yaslab/CSV.swift.git", from: "2.5.2"),
        .package(url: "https://github.com/swiftcsv/SwiftCSV.git", from: "0.10.0"),
    ],
    targets: [.executableTarget(name: "csvbench", dependencies: [.product(name: "CSV", package: "CSV.swift"), "SwiftCSV"])]
)
