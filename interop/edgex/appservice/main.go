// app-interop: an EdgeX application service built with app-functions-sdk-go v4, the way
// EdgeX's own app services are built, that the interop suite (../bus_out_test.go) runs as a
// process against roamkv's re-published events: its pipeline filters by device name,
// transforms each event to JSON and posts it to the test's HTTP sink. Its settings are its
// configuration file (res/configuration.yaml, given with -cf) and the environment, as EdgeX
// runs an app service without a registry or a secret store.
package main

import (
	"os"
	"strings"

	"github.com/edgexfoundry/app-functions-sdk-go/v4/pkg"
	"github.com/edgexfoundry/app-functions-sdk-go/v4/pkg/transforms"
)

func main() {
	service, ok := pkg.NewAppService("app-interop")
	if !ok {
		os.Exit(1)
	}
	lc := service.LoggingClient()
	settings, err := service.GetAppSettingStrings("Devices")
	if err != nil || len(settings) == 0 {
		lc.Errorf("ApplicationSettings.Devices: %v", err)
		os.Exit(1)
	}
	sink, err := service.GetAppSetting("SinkURL")
	if err != nil || sink == "" {
		lc.Errorf("ApplicationSettings.SinkURL: %v", err)
		os.Exit(1)
	}
	for i := range settings {
		settings[i] = strings.TrimSpace(settings[i])
	}
	if err := service.SetDefaultFunctionsPipeline(
		transforms.NewFilterFor(settings).FilterByDeviceName,
		transforms.NewConversion().TransformToJSON,
		transforms.NewHTTPSender(sink, "application/json", false).HTTPPost,
	); err != nil {
		lc.Errorf("SetDefaultFunctionsPipeline: %v", err)
		os.Exit(1)
	}
	if err := service.Run(); err != nil {
		lc.Errorf("Run: %v", err)
		os.Exit(1)
	}
	os.Exit(0)
}
