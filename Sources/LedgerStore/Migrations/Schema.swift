import Crypto
import Foundation
import LedgerCore

/// One file of `schema/functions/` (`subledger_append.sql`): the current definition of one SQL function, as
/// one `CREATE OR REPLACE FUNCTION` statement, applied by every `migrate` after the migrations.
///
/// Migrations are history (they ran once, on every database, and must never change); a function's body is
/// not, so it lives in one file where "what does `subledger_append` do now?" has one answer (docs/schema.md).
public struct SchemaFunction: Sendable, Hashable {
    public var name: String
    public var sql: String
    /// SHA-256 of the file's bytes, recorded in `schema_functions` when applied.
    public var checksum: String

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
        self.checksum = Hex.encode(SHA256.hash(data: Array(sql.utf8)))
    }

    /// Reads `<name>.sql` files; each must hold exactly one `CREATE OR REPLACE FUNCTION <name>(` statement
    /// (comments aside), so one name is defined in one file and nowhere else in the folder.
    public static func load(directory: URL) throws -> [SchemaFunction] {
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        guard fm.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw MigrationError.missingFunctions(directory.path)
        }
        var functions: [SchemaFunction] = []
        for file in try fm.contentsOfDirectory(atPath: directory.path) where file.hasSuffix(".sql") {
            let name = String(file.dropLast(4))
            let sql = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            if let problem = problem(name: name, sql: sql) { throw MigrationError.badFunctionFile(file, problem) }
            functions.append(SchemaFunction(name: name, sql: sql))
        }
        return functions.sorted { $0.name < $1.name }
    }

    /// Why a file cannot be a function file, or nil.
    static func problem(name: String, sql: String) -> String? {
        guard let first = name.unicodeScalars.first, first == "_" || ("a"..."z").contains(first),
            name.unicodeScalars.allSatisfy({ $0 == "_" || ("a"..."z").contains($0) || ("0"..."9").contains($0) })
        else { return "the name must be the function's, in lower case" }
        let statements = SQLScript.statements(sql)
        guard statements.count == 1 else { return "it holds \(statements.count) statements, not one CREATE OR REPLACE FUNCTION" }
        let words = statements[0].split(whereSeparator: \.isWhitespace).prefix(4).map { $0.lowercased() }
        guard words.count == 4, words[0] == "create", words[1] == "or", words[2] == "replace", words[3] == "function" else {
            return "its statement must begin CREATE OR REPLACE FUNCTION"
        }
        let rest = statements[0].split(whereSeparator: \.isWhitespace).dropFirst(4).joined(separator: " ")
        guard rest.lowercased().hasPrefix(name + "(") else { return "it must define \(name)(…), the function its file is named after" }
        return nil
    }
}

/// What `migrate` applies: the numbered migrations of `schema/` and the function files of `schema/functions/`.
public struct Schema: Sendable {
    public var migrations: [Migration]
    public var functions: [SchemaFunction]

    public init(migrations: [Migration], functions: [SchemaFunction]) {
        self.migrations = migrations
        self.functions = functions
    }

    /// The project's `schema/` folder (see `Migration.schemaDirectory`) and its `functions/`.
    public static func bundled() throws -> Schema {
        try load(directory: Migration.schemaDirectory())
    }

    public static func load(directory: URL) throws -> Schema {
        Schema(
            migrations: try Migration.load(directory: directory),
            functions: try SchemaFunction.load(directory: directory.appendingPathComponent("functions")))
    }

    /// A checksum of every file, for caches of migrated databases (the test template).
    public var fingerprint: String {
        (migrations.map { $0.name + $0.checksum } + functions.map { $0.name + $0.checksum }).joined()
    }
}
