import LedgerCore
import Testing

@Suite("API roles")
struct APIRoleTests {
    /// The roles table (README.md), written out as what each role may do.
    static let contract: [APIRole: Set<APIRole.Permission>] = [
        .writer: [.append],
        .reader: [.readEntitlements],
        .auditor: [.readEntitlements, .audit],
        .analyst: [.reports],
        .admin: Set(APIRole.Permission.allCases),
    ]

    static let matrix: [(APIRole, APIRole.Permission)] = APIRole.allCases.flatMap { role in
        APIRole.Permission.allCases.map { (role, $0) }
    }

    @Test("allows exactly what the contract table grants", arguments: matrix)
    func allows(role: APIRole, permission: APIRole.Permission) throws {
        let granted = try #require(Self.contract[role])
        #expect(role.allows(permission) == granted.contains(permission))
    }

    @Test("the matrix covers five roles and five permissions")
    func coverage() {
        #expect(Self.matrix.count == 25)
        #expect(Set(APIRole.allCases) == Set(Self.contract.keys))
    }

    @Test("only admin manages keys and the catalog")
    func manage() {
        #expect(APIRole.allCases.filter { $0.allows(.manage) } == [.admin])
    }

    @Test("an auditor may do everything a reader may")
    func auditorIncludesReader() {
        for p in APIRole.Permission.allCases where APIRole.reader.allows(p) {
            #expect(APIRole.auditor.allows(p))
        }
    }

    @Test("admin may do everything any role may")
    func adminIncludesAll() {
        for role in APIRole.allCases {
            for p in APIRole.Permission.allCases where role.allows(p) {
                #expect(APIRole.admin.allows(p))
            }
        }
    }

    @Test(
        "role names as stored with API keys",
        arguments: [
            ("writer", APIRole.writer), ("reader", .reader), ("auditor", .auditor), ("analyst", .analyst), ("admin", .admin),
        ])
    func rawValues(name: String, role: APIRole) {
        #expect(APIRole(rawValue: name) == role)
        #expect(role.rawValue == name)
    }

    @Test("unknown role names are not roles", arguments: ["Admin", "root", "", "write"])
    func unknown(name: String) {
        #expect(APIRole(rawValue: name) == nil)
    }
}
