package telegram_test

import (
	"fmt"

	"github.com/ferryq/ferry/telegram"
)

func ExampleParseCommand() {
	command, bot, args, ok := telegram.ParseCommand("/remind@SupportBot 10m call Ann")
	fmt.Println(command, bot, args, ok)
	_, _, _, ok = telegram.ParseCommand("just text")
	fmt.Println(ok)
	// Output:
	// remind SupportBot [10m call Ann] true
	// false
}
