// Starts Swagger UI on the API's OpenAPI document (the page allows no
// inline script). No top bar (it would load any URL typed in it), no
// validator (it would send the document to a third party), and an
// authorization pasted into Authorize is not kept after the page closes.
window.ui = SwaggerUIBundle({
  url: "/api/v1/subscriber/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
  plugins: [
    SwaggerUIBundle.plugins.DownloadUrl,
    function () { return { components: { Topbar: function () { return null; } } }; }
  ],
  layout: "StandaloneLayout",
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  defaultModelsExpandDepth: -1,
  persistAuthorization: false,
  tryItOutEnabled: true,
  displayRequestDuration: true
});
