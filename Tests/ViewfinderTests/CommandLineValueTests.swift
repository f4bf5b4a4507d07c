import Foundation
import Testing
import Viewfinder

/// Option values typed on the command line (`--stages exposure:bias=0.3,focus:point=0.2/0.4`).
@Suite struct CommandLineValueTests {
    @Test func wordsBecomeBooleansNumbersListsAndStrings() {
        #expect(JSONValue(commandLine: "true") == .bool(true))
        #expect(JSONValue(commandLine: "-0.5") == .number(-0.5))
        #expect(JSONValue(commandLine: "0.2/0.4") == .array([.number(0.2), .number(0.4)]))
        #expect(JSONValue(commandLine: "a//b") == .array([.string("a"), .string(""), .string("b")]))
        #expect(JSONValue(commandLine: "continuous") == .string("continuous"))
    }

    /// FuzzPipeline (27 Nov, after 73 073 runs): a `/` joined to a combining mark (U+0940) is one
    /// Character. The word was taken for a list by a scalar search and then split by Character,
    /// which left it whole, and parsed again — until the stack overflowed. It is a string now.
    @Test func aSlashJoinedToACombiningMarkIsNotASeparator() throws {
        let word = "a/\u{0940}c"
        #expect(JSONValue(commandLine: word) == .string(word))
        #expect(JSONValue(commandLine: "x/\u{0940}/y") == .array([.string("x/\u{0940}"), .string("y")]))
        // The fuzzer's input, as a stage list: parsed (or refused) without crashing.
        let data = try #require(Data(base64Encoded: Self.crash))
        let specs = try StageSpec.parseList(String(decoding: data.dropFirst(), as: UTF8.self))
        #expect(specs.first?.name == "exposure")
    }

    static let crash = "AWV4cG9zdXJlOm1vZG90aT1jbmUUFBQUFBQUAAB7iS/gpYBjZXBhAWV4cG9zdXJlOm1vZG09YwEAdW8UFG4AAAAAAAABXWV4cG9wL3guO3ZmZHVtcCxwYf9hZwBl"
}
